package jobcert

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// now is the tests' clock: whole seconds, so that validity bounds are
// exact.
var now = time.Unix(1_900_000_000, 0)

func spec() Spec {
	return Spec{User: "alice", JobID: "0123abcd", Relay: "node7", Sources: []string{"198.18.0.7", "fd00::/64"}, Lifetime: 2 * time.Hour, Now: now}
}

var (
	edKey  = mustSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)), nil)
	ecKey  = mustSigner(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	rsaKey = mustSigner(rsa.GenerateKey(rand.Reader, 2048))
)

func mustSigner[K any](key K, err error) ssh.Signer {
	if err != nil {
		panic(err)
	}
	s, err := ssh.NewSignerFromKey(key)
	if err != nil {
		panic(err)
	}
	return s
}

// failing is a signer whose signatures fail.
type failing struct{ ssh.Signer }

func (failing) Sign(io.Reader, []byte) (*ssh.Signature, error) {
	return nil, errors.New("token removed")
}

// plainRSA hides the AlgorithmSigner of an RSA signer: it could only
// sign with ssh-rsa (SHA-1).
type plainRSA struct{ s ssh.Signer }

func (p plainRSA) PublicKey() ssh.PublicKey { return p.s.PublicKey() }
func (p plainRSA) Sign(r io.Reader, b []byte) (*ssh.Signature, error) {
	return p.s.Sign(r, b)
}

// certOf is a signer of a certificate (a -cert.pub beside a key).
func certOf(t *testing.T, s ssh.Signer) ssh.Signer {
	t.Helper()
	c := &ssh.Certificate{Key: s.PublicKey(), CertType: ssh.UserCert, ValidPrincipals: []string{"alice"}, ValidBefore: ssh.CertTimeInfinity}
	if err := c.SignCert(rand.Reader, edKey); err != nil {
		t.Fatal(err)
	}
	cs, err := ssh.NewCertSigner(c, s)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// parse parses a bundle's certificate i.
func parse(t *testing.T, b Bundle, i int) *ssh.Certificate {
	t.Helper()
	pk, err := ssh.ParsePublicKey(b.Certs[i])
	if err != nil {
		t.Fatal(err)
	}
	return pk.(*ssh.Certificate)
}

// verify checks cert's signature as an agent does, with signer's key as
// the only authority.
func verify(t *testing.T, cert *ssh.Certificate, signer ssh.Signer, at time.Time) error {
	t.Helper()
	cc := ssh.CertChecker{
		IsUserAuthority:          func(k ssh.PublicKey) bool { return string(k.Marshal()) == string(signer.PublicKey().Marshal()) },
		SupportedCriticalOptions: []string{"force-command", "source-address"},
		Clock:                    func() time.Time { return at },
	}
	return cc.CheckCert(cert.ValidPrincipals[0], cert)
}

func TestNew(t *testing.T) {
	b, err := New(rand.Reader, []ssh.Signer{edKey, ecKey, rsaKey}, spec())
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Certs) != 3 {
		t.Fatalf("%d certificates, want 3", len(b.Certs))
	}
	key, err := ssh.ParsePrivateKey(b.Key)
	if err != nil {
		t.Fatal(err)
	}
	if key.PublicKey().Type() != ssh.KeyAlgoED25519 {
		t.Errorf("ephemeral key is %s", key.PublicKey().Type())
	}
	serials := map[uint64]bool{}
	for i, signer := range []ssh.Signer{edKey, ecKey, rsaKey} {
		c := parse(t, b, i)
		if err := verify(t, c, signer, now); err != nil {
			t.Errorf("certificate %d: %v", i, err)
		}
		if string(c.SignatureKey.Marshal()) != string(signer.PublicKey().Marshal()) {
			t.Errorf("certificate %d signed by %s", i, ssh.FingerprintSHA256(c.SignatureKey))
		}
		if string(c.Key.Marshal()) != string(key.PublicKey().Marshal()) {
			t.Errorf("certificate %d certifies another key", i)
		}
		if c.KeyId != "gangway-job:0123abcd:node7" || JobID(c) != "0123abcd" || Relay(c) != "node7" {
			t.Errorf("key ID %q, job %q, relay %q", c.KeyId, JobID(c), Relay(c))
		}
		if c.CertType != ssh.UserCert || len(c.ValidPrincipals) != 1 || c.ValidPrincipals[0] != "alice" {
			t.Errorf("type %d, principals %q", c.CertType, c.ValidPrincipals)
		}
		if c.ValidAfter != uint64(now.Unix()-60) || c.ValidBefore != uint64(now.Add(2*time.Hour).Unix()) {
			t.Errorf("valid %d..%d, want now-60s..now+2h", c.ValidAfter, c.ValidBefore)
		}
		want := map[string]string{"force-command": ForceCommand, "source-address": "198.18.0.7,fd00::/64"}
		if len(c.CriticalOptions) != 2 || c.CriticalOptions["force-command"] != want["force-command"] || c.CriticalOptions["source-address"] != want["source-address"] {
			t.Errorf("critical options %q, want %q", c.CriticalOptions, want)
		}
		if len(c.Extensions) != 0 {
			t.Errorf("extensions %q, want none", c.Extensions)
		}
		serials[c.Serial] = true
		if err := Check(c, "alice", &net.TCPAddr{IP: net.ParseIP("198.18.0.7")}, now); err != nil {
			t.Errorf("certificate %d fails Check: %v", i, err)
		}
	}
	if len(serials) != 3 {
		t.Errorf("serials %v, want three random ones", serials)
	}
	if f := parse(t, b, 2).Signature.Format; f != ssh.KeyAlgoRSASHA512 {
		t.Errorf("RSA signature %s, want %s", f, ssh.KeyAlgoRSASHA512)
	}
}

// TestNewLifetime: a lifetime longer than allowed is capped so that
// Check accepts the certificate.
func TestNewLifetime(t *testing.T) {
	s := spec()
	s.Lifetime = 30 * 24 * time.Hour
	b, err := New(rand.Reader, []ssh.Signer{edKey}, s)
	if err != nil {
		t.Fatal(err)
	}
	c := parse(t, b, 0)
	if got := time.Duration(c.ValidBefore-c.ValidAfter) * time.Second; got > MaxLifetime || got < MaxLifetime-2*time.Minute {
		t.Errorf("valid for %v, want just under %v", got, MaxLifetime)
	}
	if err := Check(c, "alice", &net.TCPAddr{IP: net.ParseIP("198.18.0.7")}, now.Add(7*24*time.Hour)); err != nil {
		t.Error(err)
	}
}

func TestNewErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		signers []ssh.Signer
		edit    func(*Spec)
		want    string // in the error; "" for success
		certs   int
	}{
		{"no signers", nil, nil, "no key of the user", 0},
		{"no sources", []ssh.Signer{edKey}, func(s *Spec) { s.Sources = nil }, "no source addresses", 0},
		{"bad source", []ssh.Signer{edKey}, func(s *Spec) { s.Sources = []string{"198.18.0.1", "node3"} }, `bad source address "node3"`, 0},
		{"no user", []ssh.Signer{edKey}, func(s *Spec) { s.User = "" }, "no user", 0},
		{"no job id", []ssh.Signer{edKey}, func(s *Spec) { s.JobID = "" }, "job id", 0},
		{"colon in job id", []ssh.Signer{edKey}, func(s *Spec) { s.JobID = "a:b" }, "job id", 0},
		{"no lifetime", []ssh.Signer{edKey}, func(s *Spec) { s.Lifetime = 0 }, "lifetime", 0},
		{"every signer fails", []ssh.Signer{failing{edKey}, plainRSA{rsaKey}}, nil, "none of the user's 2 keys signed it", 0},
		{"a certificate signs nothing", []ssh.Signer{certOf(t, ecKey)}, nil, "cannot be used as authority", 0},
		{"one signer fails, another works", []ssh.Signer{failing{rsaKey}, plainRSA{rsaKey}, certOf(t, ecKey), edKey}, nil, "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := spec()
			if tc.edit != nil {
				tc.edit(&s)
			}
			b, err := New(rand.Reader, tc.signers, s)
			if tc.want == "" {
				if err != nil || len(b.Certs) != tc.certs {
					t.Fatalf("%d certificates, %v; want %d", len(b.Certs), err, tc.certs)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	// The RSA signer without rsa-sha2-512 says why.
	_, err := New(rand.Reader, []ssh.Signer{plainRSA{rsaKey}}, spec())
	if err == nil || !strings.Contains(err.Error(), "cannot sign with rsa-sha2-512") {
		t.Errorf("plain RSA signer: %v", err)
	}
}

func TestCheck(t *testing.T) {
	b, err := New(rand.Reader, []ssh.Signer{edKey}, spec())
	if err != nil {
		t.Fatal(err)
	}
	relay := &net.TCPAddr{IP: net.ParseIP("198.18.0.7"), Port: 40000}
	for _, tc := range []struct {
		name   string
		mutate func(*ssh.Certificate)
		user   string
		remote net.Addr
		at     time.Time
		want   string // in the error; "" to accept
	}{
		{name: "as made"},
		{name: "from the CIDR block", remote: &net.TCPAddr{IP: net.ParseIP("fd00::42")}},
		{name: "IPv4 in IPv6", remote: &net.TCPAddr{IP: net.ParseIP("::ffff:198.18.0.7")}},
		{name: "just before expiry", at: now.Add(2*time.Hour - time.Second)},
		{name: "lifetime exactly the most", mutate: func(c *ssh.Certificate) { c.ValidBefore = c.ValidAfter + uint64(MaxLifetime/time.Second) }},
		{name: "another key ID", mutate: func(c *ssh.Certificate) { c.KeyId = "alice@laptop" }, want: "does not name a job"},
		{name: "host certificate", mutate: func(c *ssh.Certificate) { c.CertType = ssh.HostCert }, want: "not a user certificate"},
		{name: "another user", user: "bob", want: `are not exactly ["bob"]`},
		{name: "no principals", mutate: func(c *ssh.Certificate) { c.ValidPrincipals = nil }, want: "not exactly"},
		{name: "two principals", mutate: func(c *ssh.Certificate) { c.ValidPrincipals = []string{"alice", "root"} }, want: "not exactly"},
		{name: "not yet valid", at: now.Add(-2 * time.Minute), want: "not yet valid"},
		{name: "expired", at: now.Add(2 * time.Hour), want: "expired"},
		{name: "too long", mutate: func(c *ssh.Certificate) { c.ValidBefore = c.ValidAfter + uint64(MaxLifetime/time.Second) + 1 }, want: "longer than 192h0m0s"},
		{name: "forever", mutate: func(c *ssh.Certificate) { c.ValidBefore = ssh.CertTimeInfinity }, want: "valid forever"},
		{name: "extra critical option", mutate: func(c *ssh.Certificate) { c.CriticalOptions["verify-required"] = "" }, want: `critical option "verify-required"`},
		{name: "another force-command", mutate: func(c *ssh.Certificate) { c.CriticalOptions["force-command"] = "/bin/sh" }, want: `force-command "/bin/sh"`},
		{name: "no force-command", mutate: func(c *ssh.Certificate) { delete(c.CriticalOptions, "force-command") }, want: "force-command"},
		{name: "no source-address", mutate: func(c *ssh.Certificate) { delete(c.CriticalOptions, "source-address") }, want: "no source-address"},
		{name: "empty source-address", mutate: func(c *ssh.Certificate) { c.CriticalOptions["source-address"] = "" }, want: "no source-address"},
		{name: "bad source-address entry", mutate: func(c *ssh.Certificate) { c.CriticalOptions["source-address"] = "198.18.0.7,node3" }, want: `bad source address "node3"`},
		{name: "space in source-address", mutate: func(c *ssh.Certificate) { c.CriticalOptions["source-address"] = "198.18.0.7, 198.18.0.8" }, want: "bad source address"},
		{name: "from elsewhere", remote: &net.TCPAddr{IP: net.ParseIP("198.18.0.8")}, want: "does not allow 198.18.0.8"},
		{name: "not a TCP client", remote: &net.UnixAddr{Name: "/run/x", Net: "unix"}, want: "cannot check"},
		{name: "no client address", remote: (*net.TCPAddr)(nil), want: "cannot check"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := parse(t, b, 0)
			if tc.mutate != nil {
				tc.mutate(c)
				if err := c.SignCert(rand.Reader, edKey); err != nil {
					t.Fatal(err)
				}
				// Check reads a certificate as an agent receives it.
				pk, err := ssh.ParsePublicKey(c.Marshal())
				if err != nil {
					t.Fatal(err)
				}
				c = pk.(*ssh.Certificate)
			}
			user, remote, at := "alice", net.Addr(relay), now
			if tc.user != "" {
				user = tc.user
			}
			if tc.remote != nil {
				remote = tc.remote
			}
			if !tc.at.IsZero() {
				at = tc.at
			}
			err := Check(c, user, remote, at)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if err := verify(t, c, edKey, at); err != nil {
					t.Fatalf("signature: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	if err := Check(nil, "alice", relay, now); err == nil {
		t.Error("nil certificate accepted")
	}
}

func TestSigners(t *testing.T) {
	good, err := New(rand.Reader, []ssh.Signer{edKey, rsaKey}, spec())
	if err != nil {
		t.Fatal(err)
	}
	signers, err := good.Signers()
	if err != nil {
		t.Fatal(err)
	}
	if len(signers) != 2 {
		t.Fatalf("%d signers, want 2", len(signers))
	}
	for i, s := range signers {
		c, ok := s.PublicKey().(*ssh.Certificate)
		if !ok || string(c.Marshal()) != string(good.Certs[i]) {
			t.Errorf("signer %d presents %s, want certificate %d", i, s.PublicKey().Type(), i)
		}
		sig, err := s.Sign(rand.Reader, []byte("session id"))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Key.Verify([]byte("session id"), sig); err != nil {
			t.Errorf("signer %d: signature does not verify with the certified key: %v", i, err)
		}
	}

	other, err := New(rand.Reader, []ssh.Signer{edKey}, spec())
	if err != nil {
		t.Fatal(err)
	}
	nonJob := parse(t, good, 0)
	nonJob.KeyId = "alice@laptop"
	if err := nonJob.SignCert(rand.Reader, edKey); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		b    Bundle
		want string
	}{
		{"no key", Bundle{Certs: good.Certs}, "its key"},
		{"garbage key", Bundle{Key: []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n"), Certs: good.Certs}, "its key"},
		{"no certificates", Bundle{Key: good.Key}, "no certificates"},
		{"garbage certificate", Bundle{Key: good.Key, Certs: [][]byte{good.Certs[0][:40]}}, "certificate 0"},
		{"plain key", Bundle{Key: good.Key, Certs: [][]byte{edKey.PublicKey().Marshal()}}, "plain ssh-ed25519 key"},
		{"another key's certificate", Bundle{Key: good.Key, Certs: [][]byte{good.Certs[0], other.Certs[0]}}, "certificate 1 certifies another key"},
		{"not a job certificate", Bundle{Key: good.Key, Certs: [][]byte{nonJob.Marshal()}}, "not a job certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.b.Signers(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestIsJobID(t *testing.T) {
	for _, tc := range []struct {
		keyID, job, relay string
		is                bool
	}{
		{"gangway-job:abc:node1", "abc", "node1", true},
		{"gangway-job:abc:fd00::1", "abc", "fd00::1", true},
		{"gangway-job:abc", "abc", "", true},
		{"gangway-job:", "", "", true},
		{"alice@laptop", "", "", false},
		{"", "", "", false},
	} {
		c := &ssh.Certificate{KeyId: tc.keyID}
		if Is(c) != tc.is || JobID(c) != tc.job || Relay(c) != tc.relay {
			t.Errorf("%q: Is %v, JobID %q, Relay %q; want %v %q %q", tc.keyID, Is(c), JobID(c), Relay(c), tc.is, tc.job, tc.relay)
		}
	}
	if Is(nil) || JobID(nil) != "" {
		t.Error("nil certificate")
	}
}

// BenchmarkNew: what the launcher spends on a job's certificate with
// one user key of each kind, and what a relay spends reading it.
func BenchmarkNew(b *testing.B) {
	for _, tc := range []struct {
		name   string
		signer ssh.Signer
	}{{"ed25519", edKey}, {"ecdsa-p256", ecKey}, {"rsa-2048", rsaKey}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := New(rand.Reader, []ssh.Signer{tc.signer}, spec()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	bundle, err := New(rand.Reader, []ssh.Signer{edKey}, spec())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Signers", func(b *testing.B) {
		for b.Loop() {
			if _, err := bundle.Signers(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
