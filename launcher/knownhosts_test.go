package launcher

import (
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"os"
	"path/filepath"
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
		}
	}
	if len(lines) != 2 || lines[0] != 3 || lines[1] != 4 {
		t.Errorf("warnings for lines %v, want 3 and 4: %v", lines, logs.All())
	}
}
