package e2e_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/agent/agenttest"
	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/agent/sshd"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

// certsScript runs examples/certs.sh with args and returns its output.
func certsScript(t testing.TB, args ...string) string {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "..", "..", "examples", "certs.sh"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(script, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("certs.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestExampleCerts: the certificates examples/certs.sh issues work end
// to end. Agents present host certificates it signed and trust its user
// CA; the launcher, with a known_hosts holding only the line the script
// prints and a key known to no authorized_keys but certified by the
// script, runs a job on them.
func TestExampleCerts(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "ca")
	certsScript(t, "ca", dir)
	c := e2e.StartLocal(t, 2,
		agenttest.WithHostCert(func(t testing.TB, h *agenttest.Host) string {
			certsScript(t, "host", dir, h.HostKey+".pub", h.Addr+",agent.example")
			return h.HostKey + "-cert.pub"
		}),
		agenttest.WithServer(func(_ int, s *sshd.Server) { s.TrustedUserCAKeys = filepath.Join(dir, "user_ca.pub") }))
	keys, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	certsScript(t, "user", dir, keys.ClientPub, "root", "+1h")
	var pats []string
	for _, h := range c.Hosts {
		pats = append(pats, fmt.Sprintf("[%s]:%d", h.Addr, h.Port))
	}
	kh := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(kh, []byte(certsScript(t, "known-hosts", dir, strings.Join(pats, ","))), 0o600); err != nil {
		t.Fatal(err)
	}
	// The plain key alone is refused: the certificate is what lets it in.
	if err := os.Rename(keys.ClientKey+"-cert.pub", keys.ClientKey+"-cert.pub.off"); err != nil {
		t.Fatal(err)
	}
	args := fake(t, 2, c.HostList(1), "exit:0", "-i", keys.ClientKey, "--known-hosts", kh, "--start-timeout", "60s")
	if _, stderr, code := c.RunLauncher(t, args...); code != 1 || !strings.Contains(stderr, "authentication refused for user root") {
		t.Errorf("without the user certificate: exit %d, want 1 and authentication refused\nstderr:\n%s", code, stderr)
	}
	if err := os.Rename(keys.ClientKey+"-cert.pub.off", keys.ClientKey+"-cert.pub"); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := c.RunLauncher(t, args...); code != 0 {
		t.Errorf("with the user and host certificates: exit %d\nstderr:\n%s", code, stderr)
	}
}
