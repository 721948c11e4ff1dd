package transport

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// seededKey is a fixed ed25519 key, so that fuzz seeds can name it.
func seededKey(n byte) ssh.Signer {
	seed := make([]byte, ed25519.SeedSize)
	seed[0] = n
	s, err := ssh.NewSignerFromKey(ed25519.NewKeyFromSeed(seed))
	if err != nil {
		panic(err)
	}
	return s
}

// khKeys are the keys the index tests use: 0-3 host keys, 4 a host CA.
var khKeys = func() []ssh.Signer {
	var s []ssh.Signer
	for i := range 5 {
		s = append(s, seededKey(byte(i+1)))
	}
	return s
}()

func authorized(i int) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(khKeys[i].PublicKey())))
}

// khOutcome is what a host key callback said, comparable across the two
// implementations: ok, revoked (by line), the lines of a KeyError, or an
// error's text.
func khOutcome(err error) string {
	var ke *knownhosts.KeyError
	var re *knownhosts.RevokedError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &re):
		return fmt.Sprintf("revoked line %d", re.Revoked.Line)
	case errors.As(err, &ke):
		var lines []int
		for _, k := range ke.Want {
			lines = append(lines, k.Line)
		}
		slices.Sort(lines)
		return fmt.Sprintf("key error, lines %v", lines)
	}
	return "error: " + err.Error()
}

// khQueries checks every host of hosts with every key (and a certificate
// by the CA key for the host) through both callbacks.
func khCompare(t *testing.T, text string, hosts []string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	// The reference: x/crypto over the lines it parses one by one (lines
	// parse independently; readKnownHosts skips the others).
	lines := strings.Split(text, "\n")
	one := filepath.Join(dir, "line")
	for i, l := range lines {
		if err := os.WriteFile(one, []byte(l), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := knownhosts.New(one); err != nil {
			lines[i] = ""
		}
	}
	ref := filepath.Join(dir, "reference")
	if err := os.WriteFile(ref, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	want, werr := knownhosts.New(ref)
	got, gerr := readKnownHosts(path, zap.NewNop())
	if werr != nil || gerr != nil {
		t.Fatalf("x/crypto over the lines it parses: %v; the index: %v", werr, gerr)
	}
	remote := &net.TCPAddr{IP: net.IPv4(198, 18, 0, 9), Port: 22}
	for _, h := range hosts {
		var keys []ssh.PublicKey
		for _, s := range khKeys {
			keys = append(keys, s.PublicKey())
		}
		cert := &ssh.Certificate{Key: khKeys[0].PublicKey(), CertType: ssh.HostCert, ValidPrincipals: []string{knownhosts.Normalize(h)}, ValidBefore: uint64(time.Now().Add(time.Hour).Unix())}
		if err := cert.SignCert(rand.Reader, khKeys[4]); err == nil {
			keys = append(keys, cert)
		}
		for i, k := range keys {
			w, g := khOutcome(want(h, remote, k)), khOutcome(got(h, remote, k))
			if w != g {
				t.Errorf("host %q key %d: x/crypto says %s, the index %s\nfile:\n%s", h, i, w, g, text)
			}
		}
	}
}

func TestKnownHostsIndexAgreesWithXCrypto(t *testing.T) {
	lines := []string{
		"# a cluster's file",
		"gpu01 " + authorized(0),
		"gpu02,198.18.0.2 " + authorized(1),
		"[gpu03]:22122 " + authorized(2),
		"gpu03:2222 " + authorized(3),
		"gpu01 " + authorized(1) + " second key, same host",
		"*.rack1 " + authorized(0),
		"gpu0?,!gpu05 " + authorized(3),
		"@cert-authority *.ca " + authorized(4),
		"@revoked * " + authorized(2),
		"  \tgpu06\t" + authorized(2) + "\r",
		knownhosts.Line([]string{"hashed1"}, khKeys[1].PublicKey()),
		"::1 " + authorized(0),
		"[::1]:22122 " + authorized(1),
		"gpu07,,gpu08 " + authorized(0),
	}
	hosts := []string{"gpu01:22", "gpu02:22", "198.18.0.2:22", "gpu03:22122", "gpu03:2222", "gpu03:22", "gpu04:22", "gpu05:22",
		"a.rack1:22", "n1.ca:22", "gpu06:22", "hashed1:22", "[::1]:22", "[::1]:22122", "gpu07:22", "gpu08:22", "unknown:22", "GPU01:22"}
	khCompare(t, strings.Join(lines, "\n")+"\n", hosts)
	// Each line alone, and the file without its last newline.
	for _, l := range lines {
		khCompare(t, l, hosts)
	}
	// A line that does not parse is skipped by both (readKnownHosts
	// warns; knownhosts.New fails the whole file, so compare the rest).
	bad := slices.Clone(lines)
	bad[3] = "gpu03 ssh-ed25519 not-base64"
	path := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(path, []byte(strings.Join(bad, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	cb, err := readKnownHosts(path, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := cb("gpu02:22", &net.TCPAddr{}, khKeys[1].PublicKey()); err != nil {
		t.Errorf("gpu02 after a bad line: %v", err)
	}
	var ke *knownhosts.KeyError
	err = cb("gpu01:22", &net.TCPAddr{}, seededKey(99).PublicKey())
	if got := khOutcome(err); got != "key error, lines [2 6 8]" {
		t.Errorf("gpu01 with an unknown key: %s (want a key error naming lines 2, 6 and 8)", got)
	}
	if errors.As(err, &ke) {
		for _, k := range ke.Want {
			if k.Filename != path {
				t.Errorf("line %d named in %s, want %s", k.Line, k.Filename, path)
			}
		}
	}
}

// TestKnownHostsIndexLarge is the shape that made the index: a line per
// host of a big cluster, each host found with its own key and refused
// with another's.
func TestKnownHostsIndexLarge(t *testing.T) {
	var b strings.Builder
	const n = 4000
	for i := range n {
		fmt.Fprintf(&b, "[node%04d]:22122 %s\n", i, authorized(i%4))
	}
	path := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cb, err := readKnownHosts(path, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 7 {
		h := fmt.Sprintf("node%04d:22122", i)
		if err := cb(h, &net.TCPAddr{}, khKeys[i%4].PublicKey()); err != nil {
			t.Fatalf("%s: %v", h, err)
		}
		var ke *knownhosts.KeyError
		if err := cb(h, &net.TCPAddr{}, khKeys[(i+1)%4].PublicKey()); !errors.As(err, &ke) || len(ke.Want) != 1 || ke.Want[0].Line != i+1 {
			t.Fatalf("%s with another host's key: %v (want a mismatch naming line %d)", h, err, i+1)
		}
	}
}

func FuzzKnownHostsIndex(f *testing.F) {
	f.Add("gpu01 "+authorized(0)+"\n", "gpu01:22")
	f.Add("[gpu03]:22122,gpu03 "+authorized(2)+"\ngpu03 "+authorized(1)+"\n", "gpu03:22122")
	f.Add("*.rack1,!b.rack1 "+authorized(0)+"\n@revoked * "+authorized(1)+"\n", "a.rack1:22")
	f.Add("@cert-authority * "+authorized(4)+"\nhost "+authorized(4)+"\n", "host:22")
	f.Add("::1 "+authorized(0)+"\r\n# comment\n\n", "[::1]:22")
	f.Add("h:2222 "+authorized(3)+"\n", "h:2222")
	f.Fuzz(func(t *testing.T, text, host string) {
		if len(text) > 1<<14 || strings.Count(text, "\n") > 64 || strings.Contains(text, "\x00") {
			return
		}
		khCompare(t, text, []string{host})
	})
}

// BenchmarkKnownHostsCheck is a launch's two checks of each host through
// the index of a cluster's known_hosts (a line per host, 4,096 lines):
// the key types known for the host (the order its relay asks for keys
// in, hostKeyAlgorithms) and the key the host offered.
func BenchmarkKnownHostsCheck(b *testing.B) {
	const n = 4096
	var text strings.Builder
	for i := range n {
		fmt.Fprintf(&text, "[node%04d]:22122 %s\n", i, authorized(i%4))
	}
	path := filepath.Join(b.TempDir(), "known_hosts")
	if err := os.WriteFile(path, []byte(text.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	d := &AgentDialer{log: zap.NewNop()}
	remote := &net.TCPAddr{IP: net.IPv4(198, 18, 0, 9), Port: 22122}
	check := d.hostKeyCallbackFor(path, false)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		h := fmt.Sprintf("[node%04d]:22122", i%n)
		_ = d.hostKeyAlgorithms(path, h, remote)
		if err := check(h, remote, khKeys[i%n%4].PublicKey()); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
