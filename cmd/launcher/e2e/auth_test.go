package e2e_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"gangway/agent/agenttest/sshtest"
	"gangway/cmd/internal/e2e"
)

// TestUnknownKeyRefused: an identity missing from authorized_keys fails
// at once (no retrying until --start-timeout), naming the host.
func TestUnknownKeyRefused(t *testing.T) {
	t.Parallel()
	c := e2e.StartLocal(t, 2)
	other, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	_, stderr, code := c.RunLauncher(t, fake(t, 2, c.HostList(1), "exit:0", "-i", other.ClientKey, "--start-timeout", "60s")...)
	took := time.Since(t0)
	if code != 1 {
		t.Fatalf("exit code %d, want 1\nstderr:\n%s", code, stderr)
	}
	for _, h := range c.Hosts {
		if !strings.Contains(stderr, "host "+h.Addr+": authentication refused") {
			t.Errorf("stderr does not name %s and authentication:\n%s", h.Addr, stderr)
		}
	}
	if took > 30*time.Second {
		t.Errorf("refused after %v: the launcher retried a permanent failure", took)
	}
	t.Logf("refused after %v:\n%s", took.Round(time.Millisecond), stderr)
}

// TestHostKeyMismatch: known_hosts holds another key for one host; the
// launcher refuses it at once, naming the host and the offered key's
// fingerprint.
func TestHostKeyMismatch(t *testing.T) {
	t.Parallel()
	c := e2e.StartLocal(t, 2)
	other, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	bad := c.Hosts[1]
	kh := filepath.Join(t.TempDir(), "known_hosts")
	text := knownhosts.Line([]string{knownhosts.Normalize(c.Hosts[0].HostPort())}, c.Hosts[0].HostPub) + "\n" +
		knownhosts.Line([]string{knownhosts.Normalize(bad.HostPort())}, other.HostSigner.PublicKey()) + "\n"
	if err := os.WriteFile(kh, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	_, stderr, code := c.RunLauncher(t, fake(t, 2, c.HostList(1), "exit:0", "--known-hosts", kh, "--start-timeout", "60s")...)
	took := time.Since(t0)
	if code != 1 {
		t.Fatalf("exit code %d, want 1\nstderr:\n%s", code, stderr)
	}
	fp := ssh.FingerprintSHA256(bad.HostPub)
	for _, want := range []string{"HOST KEY MISMATCH for " + bad.HostPort(), fp, kh} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "host "+c.Hosts[0].Addr+":") {
		t.Errorf("stderr blames the good host %s too:\n%s", c.Hosts[0].Addr, stderr)
	}
	if took > 30*time.Second {
		t.Errorf("refused after %v: the launcher retried a permanent failure", took)
	}
	t.Logf("refused after %v:\n%s", took.Round(time.Millisecond), stderr)
}

// TestNewHostKeys: unknown host keys are refused unless
// --accept-new-host-keys, which records them for later runs.
func TestNewHostKeys(t *testing.T) {
	t.Parallel()
	c := e2e.StartLocal(t, 2)
	kh := filepath.Join(t.TempDir(), "ssh", "known_hosts") // neither file nor directory exists
	args := func(extra ...string) []string {
		return fake(t, 2, c.HostList(1), "exit:0", append([]string{"--known-hosts", kh, "--start-timeout", "60s"}, extra...)...)
	}
	_, stderr, code := c.RunLauncher(t, args()...)
	if code != 1 {
		t.Fatalf("unknown keys: exit code %d, want 1\nstderr:\n%s", code, stderr)
	}
	for _, h := range c.Hosts {
		want := fmt.Sprintf("unknown host key for %s (%s)", h.HostPort(), ssh.FingerprintSHA256(h.HostPub))
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if !strings.Contains(stderr, "--accept-new-host-keys") {
		t.Errorf("stderr does not suggest --accept-new-host-keys:\n%s", stderr)
	}

	if _, stderr, code = c.RunLauncher(t, args("--accept-new-host-keys")...); code != 0 {
		t.Fatalf("--accept-new-host-keys: exit code %d\nstderr:\n%s", code, stderr)
	}
	cb, err := knownhosts.New(kh)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range c.Hosts {
		addr := &net.TCPAddr{IP: net.ParseIP(h.Addr), Port: h.Port}
		if err := cb(h.HostPort(), addr, h.HostPub); err != nil {
			t.Errorf("%s not recorded: %v", h.HostPort(), err)
		}
	}
	b, _ := os.ReadFile(kh)
	t.Logf("recorded:\n%s", b)

	if _, stderr, code = c.RunLauncher(t, args()...); code != 0 {
		t.Fatalf("recorded keys: exit code %d\nstderr:\n%s", code, stderr)
	}
}

// TestStartTimeout: a host where nothing listens fails the launch at
// --start-timeout, naming the host and why.
func TestStartTimeout(t *testing.T) {
	t.Parallel()
	c := e2e.StartLocal(t, 1)
	addr, port := c.Unused(t)
	hosts := fmt.Sprintf("%s,%s:1:%d", c.HostList(1), addr, port)
	t0 := time.Now()
	stdout, stderr, code := c.RunLauncher(t, fake(t, 2, hosts, "exit:0", "--start-timeout", "2s")...)
	took := time.Since(t0)
	if code != 1 {
		t.Fatalf("exit code %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"--start-timeout 2s", "host " + addr + ":", "refused"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "host "+c.Hosts[0].Addr+":") {
		t.Errorf("stderr blames the live host %s:\n%s", c.Hosts[0].Addr, stderr)
	}
	if stdout != "" {
		t.Errorf("a rank ran although a host was missing:\n%s", stdout)
	}
	t.Logf("failed after %v:\n%s", took.Round(time.Millisecond), stderr)
}

// TestStartWaitShowsMissing: while waiting for hosts, the launcher says
// which are still missing (without -v).
func TestStartWaitShowsMissing(t *testing.T) {
	t.Parallel()
	c := e2e.StartLocal(t, 1)
	addr, port := c.Unused(t)
	hosts := fmt.Sprintf("%s,%s:1:%d", c.HostList(1), addr, port)
	_, stderr, code := c.RunLauncher(t, fake(t, 2, hosts, "exit:0", "--start-timeout", "4s")...)
	if code != 1 {
		t.Fatalf("exit code %d, want 1\nstderr:\n%s", code, stderr)
	}
	before, _, _ := strings.Cut(stderr, "launcher: hosts not reachable")
	if !strings.Contains(before, "waiting for hosts") || !strings.Contains(before, addr) {
		t.Errorf("no progress naming %s before the failure:\n%s", addr, stderr)
	}
	t.Logf("stderr:\n%s", stderr)
}
