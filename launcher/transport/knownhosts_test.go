package transport

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

func hostKey(t *testing.T) ssh.PublicKey {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestKnownHostsBadLine: lines that do not parse are skipped with a
// warning naming file and line; the good lines still verify their hosts.
func TestKnownHostsBadLine(t *testing.T) {
	a, b := hostKey(t), hostKey(t)
	path := filepath.Join(t.TempDir(), "known_hosts")
	text := strings.Join([]string{
		"# comment",
		knownhosts.Line([]string{"[a]:22122"}, a),
		"this line is garbage",
		"b ssh-ed25519 !!notbase64!!",
		knownhosts.Line([]string{"[b]:22122"}, b),
	}, "\n") + "\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	cb, err := readKnownHosts(path, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	addr := &net.TCPAddr{IP: net.IPv4(198, 18, 0, 1), Port: 22122}
	if err := cb("a:22122", addr, a); err != nil {
		t.Errorf("host a: %v", err)
	}
	if err := cb("b:22122", addr, b); err != nil {
		t.Errorf("host b after two bad lines: %v", err)
	}
	if err := cb("b:22122", addr, a); err == nil {
		t.Error("host b accepted a's key")
	}
	var lines []int64
	for _, e := range logs.All() {
		if e.ContextMap()["file"] == path {
			lines = append(lines, e.ContextMap()["line"].(int64))
			if msg, _ := e.ContextMap()["error"].(string); !strings.Contains(msg, path) {
				t.Errorf("warning's error %q does not name %s", msg, path)
			}
		}
	}
	if len(lines) != 2 || lines[0] != 3 || lines[1] != 4 {
		t.Errorf("warnings for lines %v, want 3 and 4: %v", lines, logs.All())
	}
}

// TestHostKeyAlgorithms: a host is asked for the kind of key known_hosts
// can verify: its known plain key types first, certificates first when
// only a @cert-authority line matches it, plain keys first when nothing
// is known (so that --accept-new-host-keys records a plain key).
func TestHostKeyAlgorithms(t *testing.T) {
	a, ca := hostKey(t), hostKey(t)
	path := filepath.Join(t.TempDir(), "known_hosts")
	text := strings.Join([]string{
		knownhosts.Line([]string{"[a]:22122"}, a),
		"@cert-authority [b]:22122,[a]:22122 " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(ca))),
		"garbage line",
	}, "\n") + "\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cb, caLines, err := loadKnownHosts(path, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	addr := &net.TCPAddr{IP: net.IPv4(198, 18, 0, 1), Port: 22122}
	d := &AgentDialer{log: zap.NewNop()}
	isCert := func(algos []string) []bool {
		out := make([]bool, len(algos))
		for i, a := range algos {
			out[i] = isCertAlgo(a)
		}
		return out
	}
	for _, tc := range []struct {
		host      string
		types     []string
		ca        bool
		first     string
		certFirst bool
	}{
		{"a:22122", []string{ssh.KeyAlgoED25519}, true, ssh.KeyAlgoED25519, false},
		{"b:22122", nil, true, "", true},
		{"c:22122", nil, false, "", false},
	} {
		types, ca := knownFor(cb, caLines, tc.host, addr)
		if !slices.Equal(types, tc.types) || ca != tc.ca {
			t.Errorf("%s: known types %v, CA %v; want %v, %v", tc.host, types, ca, tc.types, tc.ca)
		}
		algos := hostKeyAlgorithms(types, ca)
		// The dialer's order (made once per set of known types, and
		// kept) is the same, for each host, asked again.
		for range 2 {
			if got := d.hostKeyAlgorithms(path, tc.host, addr); !slices.Equal(got, algos) {
				t.Errorf("%s: the dialer's order %v, want %v", tc.host, got, algos)
			}
		}
		if tc.first != "" && algos[0] != tc.first {
			t.Errorf("%s: algorithms %v, want %s first", tc.host, algos, tc.first)
		}
		if isCert(algos)[0] != tc.certFirst {
			t.Errorf("%s: algorithms %v; want certificates first: %v", tc.host, algos, tc.certFirst)
		}
		if len(algos) != len(ssh.SupportedAlgorithms().HostKeys) {
			t.Errorf("%s: %d algorithms, want every supported one", tc.host, len(algos))
		}
	}
	if got := hostKeyAlgorithms([]string{ssh.KeyAlgoRSA}, false); got[0] != ssh.KeyAlgoRSASHA256 || got[1] != ssh.KeyAlgoRSASHA512 {
		t.Errorf("known RSA key: %v, want rsa-sha2-256 and rsa-sha2-512 first", got)
	}
}

// hostCert is key certified as a host by ca for principals.
func hostCert(t *testing.T, ca ssh.Signer, key ssh.PublicKey, principals ...string) *ssh.Certificate {
	t.Helper()
	c := &ssh.Certificate{Key: key, CertType: ssh.HostCert, KeyId: "test", ValidPrincipals: principals, ValidBefore: ssh.CertTimeInfinity}
	if err := c.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	return c
}

func signer(t *testing.T) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOperatorModeCertAuthority: in an mpi-operator launcher pod unknown
// host keys are accepted, so anything answering on a worker's name is
// trusted as that worker, unless a @cert-authority line matches the
// name: then only a certificate that CA signed for the name is, and an
// impostor's plain key or its own certificate is refused.
func TestOperatorModeCertAuthority(t *testing.T) {
	ca, other := signer(t), signer(t)
	worker := "job-worker-0.job.default.svc"
	path := filepath.Join(t.TempDir(), "known_hosts")
	line := "@cert-authority *.job.default.svc " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(ca.PublicKey())))
	if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := &AgentDialer{cfg: Options{MPIOperator: true}, log: zap.NewNop(), khPath: path}
	check := d.hostKeyCallback()
	addr := &net.TCPAddr{IP: net.IPv4(198, 18, 0, 1), Port: 22}
	key := hostKey(t)
	if err := check(worker+":22", addr, hostCert(t, ca, key, worker)); err != nil {
		t.Errorf("the worker's certificate: %v", err)
	}
	var he *hostKeyError
	if err := check(worker+":22", addr, hostKey(t)); !errors.As(err, &he) || !he.CertOnly || !strings.Contains(err.Error(), "trusts only host certificates") {
		t.Errorf("an impostor's plain key: %v, want refused as not a certificate", err)
	}
	var ce *hostCertError
	for name, cert := range map[string]*ssh.Certificate{
		"another CA's certificate":       hostCert(t, other, key, worker),
		"a certificate for another name": hostCert(t, ca, key, "job-worker-1.job.default.svc"),
	} {
		if err := check(worker+":22", addr, cert); !errors.As(err, &ce) {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}
	// Without a line for the name, the operator's way: accepted unseen.
	if err := check("elsewhere:22", addr, hostKey(t)); err != nil {
		t.Errorf("a host no line matches: %v, want accepted in operator mode", err)
	}
}

func TestBannerText(t *testing.T) {
	for in, want := range map[string]string{
		"gangway agent: runs as alice\n": "gangway agent: runs as alice",
		"a\x1b[31mred\x07\nline two\r\n": "a[31mred line two",
		strings.Repeat("x", 600):         strings.Repeat("x", 512) + "...",
		"\n\n":                           "",
	} {
		if got := bannerText(in); got != want {
			t.Errorf("bannerText(%.30q) = %.40q, want %.40q", in, got, want)
		}
	}
}
