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

	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
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
	_, stderr, code := c.RunLauncher(t, fake(t, 2, c.HostList(1), "exit:0", "-i", other.ClientKey, "--start-timeout", "10m")...)
	took := time.Since(t0)
	if code != 1 {
		t.Fatalf("exit code %d, want 1\nstderr:\n%s", code, stderr)
	}
	for _, h := range c.Hosts {
		if !strings.Contains(stderr, "host "+h.Addr+": authentication refused") {
			t.Errorf("stderr does not name %s and authentication:\n%s", h.Addr, stderr)
		}
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
	_, stderr, code := c.RunLauncher(t, fake(t, 2, c.HostList(1), "exit:0", "--known-hosts", kh, "--start-timeout", "10m")...)
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
	t.Logf("refused after %v:\n%s", took.Round(time.Millisecond), stderr)
}

// TestNewHostKeys: unknown host keys are refused unless
// --accept-new-host-keys, which records them for later runs.
func TestNewHostKeys(t *testing.T) {
	t.Parallel()
	c := e2e.StartLocal(t, 2)
	kh := filepath.Join(t.TempDir(), "ssh", "known_hosts") // neither file nor directory exists
	args := func(extra ...string) []string {
		return fake(t, 2, c.HostList(1), "exit:0", append([]string{"--known-hosts", kh, "--start-timeout", "10m"}, extra...)...)
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
// --start-timeout, naming the host and why. The timeout (10 s) leaves the
// live host time to answer on a loaded machine: it must not be named.
func TestStartTimeout(t *testing.T) {
	t.Parallel()
	c := e2e.StartLocal(t, 1)
	addr, port := c.Unused(t)
	hosts := fmt.Sprintf("%s,%s:1:%d", c.HostList(1), addr, port)
	t0 := time.Now()
	stdout, stderr, code := c.RunLauncher(t, fake(t, 2, hosts, "exit:0", "--start-timeout", "10s")...)
	took := time.Since(t0)
	if code != 1 {
		t.Fatalf("exit code %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"--start-timeout 10s", "host " + addr + ":", "refused"} {
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

// TestStartWaitShowsMissing: while waiting for hosts, the launcher keeps
// one status line (without -v) that says how many are ready and names the
// missing one as host:port with a hint, and prints it again only when it
// changes; the final error names host:port too.
func TestStartWaitShowsMissing(t *testing.T) {
	t.Parallel()
	c := e2e.StartLocal(t, 1)
	addr, port := c.Unused(t)
	hosts := fmt.Sprintf("%s,%s:1:%d", c.HostList(1), addr, port)
	_, stderr, code := c.RunLauncher(t, fake(t, 2, hosts, "exit:0", "--start-timeout", "10s")...)
	if code != 1 {
		t.Fatalf("exit code %d, want 1\nstderr:\n%s", code, stderr)
	}
	hostPort := fmt.Sprintf("%s:%d", addr, port)
	before, after, _ := strings.Cut(stderr, "launcher: hosts not reachable within --start-timeout 10s")
	want := "launcher: ready 1/2; waiting up to 10s (--start-timeout) for " + hostPort + ": connection refused (is the agent running, and on this port?"
	if !strings.Contains(before, want) {
		t.Errorf("no status line %q before the failure:\n%s", want, stderr)
	}
	var status []string
	for _, l := range strings.Split(before, "\n") {
		if strings.HasPrefix(l, "launcher: ready ") {
			if len(status) > 0 && status[len(status)-1] == l {
				t.Errorf("status line repeated without a change: %q", l)
			}
			status = append(status, l)
		}
	}
	if !strings.Contains(after, hostPort+": connection refused") {
		t.Errorf("the failure does not name %s:\n%s", hostPort, stderr)
	}
	t.Logf("stderr:\n%s", stderr)
}

// TestUnreachableHostGrace: one dead host (nothing listens on its port)
// among two good ones with 8 ranks each, and no --start-timeout: once the
// good hosts are ready, the dead one gets --unreachable-grace (10s by
// default), then the launch fails with status 1, naming the dead host and
// its last error and blaming neither good host; no rank runs. The status
// line said how long the launcher would wait.
func TestUnreachableHostGrace(t *testing.T) {
	t.Parallel()
	c := e2e.StartLocal(t, 2)
	addr, port := c.Unused(t)
	hosts := fmt.Sprintf("%s,%s:%d:%d", c.HostList(perHost), addr, perHost, port)
	stdout, stderr, code := c.RunLauncher(t, fake(t, 3*perHost, hosts, "exit:0")...)
	if code != 1 {
		t.Fatalf("exit code %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	hostPort := fmt.Sprintf("%s:%d", addr, port)
	for _, want := range []string{
		"launcher: ready 2/3; every other host is ready, waiting 10s more (--unreachable-grace) for " + hostPort + ": connection refused",
		"hosts still unreachable 10s after every other host was ready (--unreachable-grace 10s; give --start-timeout to wait for them longer): host " + addr + ": " + hostPort + ": connection refused",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	for _, h := range c.Hosts {
		if strings.Contains(stderr, "host "+h.Addr+":") {
			t.Errorf("stderr blames the live host %s:\n%s", h.Addr, stderr)
		}
	}
	if strings.Contains(stderr, "not reachable within --start-timeout") {
		t.Errorf("waited for --start-timeout:\n%s", stderr)
	}
	if stdout != "" {
		t.Errorf("a rank ran although a host was missing:\n%s", stdout)
	}
	t.Logf("stderr:\n%s", stderr)
}

// TestUnreachableRack: five dead hosts (a rack down: nothing listens on
// the agents' port there) among two good ones with 8 ranks each: the
// launch fails with status 1 after the grace, saying the five on one
// line in node-list form with their port and reason, and no rank runs.
// In the tree phase (every host behind the one before it) the five are a
// chain of dead relays: each is reached around the one before it and
// named itself, not "its relay R is not connected yet".
func TestUnreachableRack(t *testing.T) {
	t.Parallel()
	c := e2e.StartLocal(t, 2)
	addr, port := c.Unused(t)
	prefix := addr[:strings.LastIndex(addr, ".")+1]
	hosts := c.HostList(perHost)
	for i := 240; i < 245; i++ {
		hosts += fmt.Sprintf(",%s%d:%d:%d", prefix, i, perHost, port)
	}
	stdout, stderr, code := c.RunLauncher(t, fake(t, 7*perHost, hosts, "exit:0")...)
	if code != 1 {
		t.Fatalf("exit code %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	want := fmt.Sprintf("(--unreachable-grace 10s; give --start-timeout to wait for them longer): 5 hosts (%s[240-244]), port %d: connection refused", prefix, port)
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
	if strings.Contains(stderr, "its relay") {
		t.Errorf("hosts named after their relay, not themselves:\n%s", stderr)
	}
	if stdout != "" {
		t.Errorf("a rank ran although hosts were missing:\n%s", stdout)
	}
	t.Logf("stderr:\n%s", stderr)
}

// TestStartNoSuchHostFailsAtOnce: a host name that does not resolve
// (.invalid never does) fails the launch at once with its own message,
// not after --start-timeout: the message says so (a timeout would say
// "not reachable within --start-timeout").
func TestStartNoSuchHostFailsAtOnce(t *testing.T) {
	t.Parallel()
	c := e2e.StartLocal(t, 1)
	hosts := c.HostList(1) + ",gw-no-such-host.invalid:1"
	start := time.Now()
	_, stderr, code := c.RunLauncher(t, fake(t, 2, hosts, "exit:0", "--start-timeout", "10m")...)
	t.Logf("failed after %v:\n%s", time.Since(start).Round(time.Millisecond), stderr)
	if code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	if !strings.Contains(stderr, `launcher: cannot reach every host: host gw-no-such-host.invalid: gw-no-such-host.invalid:`) ||
		!strings.Contains(stderr, `no such host ("gw-no-such-host.invalid" does not resolve)`) {
		t.Errorf("stderr lacks the no-such-host failure")
	}
	if strings.Contains(stderr, "--start-timeout") {
		t.Errorf("waited for --start-timeout on a name that does not resolve")
	}
}

// TestUnreachableHostSpare: a dead host (nothing listens on its port)
// among three good ones, the last standing by (--spares 1), 8 ranks a
// host: once the grace has passed the launcher leaves the dead host out
// before the start and the spare takes its place, saying so; the job
// runs every rank on the three good hosts, none on the dead one, and
// exits 0. The agents are processes, as users run them.
func TestUnreachableHostSpare(t *testing.T) {
	t.Parallel()
	_, agentBin := e2e.BuildBinaries(t)
	c := e2e.StartProcs(t, 3, agentBin)
	addr, port := c.Unused(t)
	dead := fmt.Sprintf("%s:%d", addr, port)
	hosts := []string{fmt.Sprintf("%s:%d:%d", c.Hosts[0].Addr, perHost, c.Hosts[0].Port), fmt.Sprintf("%s:%d:%d", addr, perHost, port)}
	for _, h := range c.Hosts[1:] {
		hosts = append(hosts, fmt.Sprintf("%s:%d:%d", h.Addr, perHost, h.Port))
	}
	np := 3 * perHost
	stdout, stderr, code := c.RunLauncher(t, fake(t, np, strings.Join(hosts, ","), "env", "-x", "GANGWAY_FAKE_VARS=RANK,GANGWAY_HOST", "--spares", "1")...)
	if code != 0 {
		t.Fatalf("exit code %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	want := fmt.Sprintf("launcher: leaving out %s before the start (not reached: %s: connection refused", addr, dead)
	if !strings.Contains(stderr, want) || !strings.Contains(stderr, "; spare "+c.Hosts[2].Addr+" takes its place") {
		t.Errorf("stderr does not say %q and that spare %s takes its place:\n%s", want, c.Hosts[2].Addr, stderr)
	}
	got := rankVars(t, stdout)
	if len(got) != np {
		t.Fatalf("output from %d ranks, want %d:\n%s", len(got), np, stdout)
	}
	per := map[string]int{}
	for r := range np {
		per[got[r]["GANGWAY_HOST"]]++
	}
	for _, h := range c.Hosts {
		if per[h.Addr] != perHost {
			t.Errorf("%d ranks on %s, want %d (ranks by host: %v)", per[h.Addr], h.Addr, perHost, per)
		}
	}
	if per[addr] != 0 {
		t.Errorf("%d ranks on the dead host", per[addr])
	}
}
