package jobcert

import (
	"crypto/rand"
	"net"
	"testing"

	"golang.org/x/crypto/ssh"
)

// FuzzBundleSigners: a relay parses whatever the launcher's message held;
// Bundle.Signers must not panic on any key or certificate bytes, and the
// signers it returns present job certificates of the bundle's key.
func FuzzBundleSigners(f *testing.F) {
	b, err := New(rand.Reader, []ssh.Signer{edKey, rsaKey}, spec())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b.Key, b.Certs[0])
	f.Add(b.Key, b.Certs[1])
	f.Add(b.Key, b.Certs[0][:len(b.Certs[0])/2])
	f.Add(b.Key[:len(b.Key)/2], b.Certs[0])
	f.Add(b.Key, edKey.PublicKey().Marshal())
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, key, cert []byte) {
		signers, err := Bundle{Key: key, Certs: [][]byte{cert}}.Signers()
		if err != nil {
			return
		}
		c, ok := signers[0].PublicKey().(*ssh.Certificate)
		if len(signers) != 1 || !ok || !Is(c) {
			t.Fatalf("accepted a bundle whose signer presents %T", signers[0].PublicKey())
		}
	})
}

// FuzzCheck: Check, Is and JobID on any certificate an agent could be
// offered must not panic, and what Check accepts keeps its rules.
func FuzzCheck(f *testing.F) {
	b, err := New(rand.Reader, []ssh.Signer{edKey}, spec())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b.Certs[0], "alice", []byte{198, 18, 0, 7})
	f.Add(b.Certs[0], "bob", []byte{127, 0, 0, 1})
	f.Add(b.Certs[0][:len(b.Certs[0])-10], "alice", []byte{198, 18, 0, 7})
	f.Fuzz(func(t *testing.T, cb []byte, user string, ip []byte) {
		pk, err := ssh.ParsePublicKey(cb)
		if err != nil {
			return
		}
		c, ok := pk.(*ssh.Certificate)
		if !ok {
			return
		}
		_ = JobID(c)
		if Check(c, user, &net.TCPAddr{IP: net.IP(ip)}, now) != nil {
			return
		}
		if !Is(c) || len(c.ValidPrincipals) != 1 || c.ValidPrincipals[0] != user || c.CriticalOptions["force-command"] != ForceCommand {
			t.Fatalf("accepted %q for %q with options %q", c.KeyId, c.ValidPrincipals, c.CriticalOptions)
		}
	})
}
