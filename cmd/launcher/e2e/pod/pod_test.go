//go:build linux

// Package pod runs examples/start-agent.sh as a Kubernetes pod would,
// without Kubernetes: PID 1 of a new PID namespace inside a
// network-namespace host, with its Secret mounted read-only in the
// kubelet's layout (timestamped directory, ..data symbolic link, one link
// per key), and the real launcher reaching it from the root namespace. It
// has only tests.
//
// Names and addresses: namespace prefix gwk, data subnet 198.18.213.0/24.
package pod

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/agent/proc/proctest"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/cmd/internal/procscan"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed/roottest"
)

const agentPort = 22122

func TestMain(m *testing.M) {
	e2e.DefaultSignals()
	code := m.Run()
	e2e.RemoveBinaries()
	os.Exit(code)
}

// secret is a directory laid out as the kubelet lays out a Secret
// volume: the files live in a timestamped directory, ..data links to it,
// and each key is a link through ..data. An update writes a new
// directory and swaps ..data in one rename, as the kubelet does.
type secret struct {
	dir     string
	version int
}

func newSecret(t *testing.T, files map[string][]byte) *secret {
	t.Helper()
	s := &secret{dir: filepath.Join(t.TempDir(), "secrets")}
	if err := os.Mkdir(s.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A Secret volume's root is a root-owned tmpfs directory, mode 1777.
	if err := os.Chmod(s.dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	s.update(t, files)
	return s
}

func (s *secret) update(t *testing.T, files map[string][]byte) {
	t.Helper()
	s.version++
	old, _ := os.Readlink(filepath.Join(s.dir, "..data"))
	v := fmt.Sprintf("..2026_01_01_00_00_%02d.%d", s.version, 1000+s.version)
	if err := os.Mkdir(filepath.Join(s.dir, v), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		p := filepath.Join(s.dir, v, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o644); err != nil { // the Secret's defaultMode, whatever the umask
			t.Fatal(err)
		}
		link := filepath.Join(s.dir, name)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(s.dir, "..data_tmp")
	if err := os.Symlink(v, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(s.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// container is one run of start-agent.sh as PID 1 of a PID namespace in
// a namespace host, the secret mounted read-only over itself.
type container struct {
	unshare *testbed.Proc
	init1   int    // the container's PID 1, as the root namespace sees it
	pidNS   string // its PID namespace, as /proc/PID/ns/pid reads
}

func startContainer(t *testing.T, bed *testbed.Bed, sec *secret, name string) *container {
	t.Helper()
	_, agentBin := e2e.BuildBinaries(t)
	script, err := filepath.Abs("../../../../examples/start-agent.sh")
	if err != nil {
		t.Fatal(err)
	}
	// The shell mounts the secret read-only, then execs start-agent.sh,
	// which execs the agent: PID 1 all along.
	cmd := bed.Command(t.Context(), 0, "unshare", "--pid", "--fork", "--mount", "--mount-proc", "--kill-child",
		"/bin/sh", "-c", `mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && exec "$2"`, "sh", sec.dir, script)
	cmd.Env = append(os.Environ(),
		"GANGWAY_SECRETS="+sec.dir,
		"GANGWAY_STATE="+filepath.Join(t.TempDir(), "state"), // fresh: a new container's file system
		"GANGWAY_AGENT="+agentBin,
		"GANGWAY_NAME="+name,
		"GANGWAY_PORT="+strconv.Itoa(agentPort),
		"GANGWAY_ARGS=--log-format console",
	)
	p, err := bed.StartCmd(cmd)
	if err != nil {
		t.Fatal(err)
	}
	c := &container{unshare: p}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("container %s (%s) output:\n%s", name, p, e2e.Tail(p.Output(), 6000))
		}
	})
	addr := bed.Hosts()[0].Addr + ":" + strconv.Itoa(agentPort)
	if err := testbed.WaitSSH(t.Context(), addr, p, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	kids := procscan.Children(p.Pid)
	if len(kids) != 1 {
		t.Fatalf("unshare (pid %d) has children %v, want one: the container's PID 1", p.Pid, kids)
	}
	c.init1 = kids[0]
	if ns := nsPids(c.init1); len(ns) < 2 || ns[len(ns)-1] != "1" {
		t.Fatalf("pid %d is not PID 1 of its namespace: NSpid %v", c.init1, ns)
	}
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", c.init1)); exe != agentBin {
		t.Fatalf("the container's PID 1 runs %q, want the agent %s (start-agent.sh must exec it)", exe, agentBin)
	}
	c.pidNS, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", c.init1))
	return c
}

// stop sends SIGTERM to the container's PID 1, as a container runtime
// stops a pod, and checks it exits 0 and that no process is left in its
// PID namespace or its host's network namespace.
func (c *container) stop(t *testing.T, bed *testbed.Bed) {
	t.Helper()
	inside := inNS(c.pidNS)
	if err := syscall.Kill(c.init1, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.unshare.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("the container still runs 30s after SIGTERM to its PID 1")
	}
	if err := c.unshare.Wait(); err != nil {
		t.Errorf("container exit after SIGTERM: %v, want code 0", err)
	}
	if left := proctest.WaitGone(10*time.Second, inside...); len(left) > 0 {
		t.Errorf("processes of the container left after its stop: %v", left)
	}
	if left := inNS(c.pidNS); len(left) > 0 {
		t.Errorf("processes still in the container's PID namespace: %v", left)
	}
	out, err := exec.CommandContext(t.Context(), "ip", "netns", "pids", bed.Hosts()[0].NS).Output()
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(string(out)); len(f) > 0 {
		t.Errorf("processes still in the host's network namespace: %v", f)
	}
	t.Logf("container stopped: %d processes before SIGTERM, none after", len(inside))
}

// TestStartAgentAsPod: start-agent.sh with a read-only Secret in the
// kubelet's layout runs the agent as the container's PID 1; a real job
// runs through it (its ranks see the agent as PID 1 and the Secret
// read-only), also by DNS name with launcher-job.yaml's wildcard
// @cert-authority known_hosts line, the Secret's host certificate (as
// workers.yaml makes it) letting the worker in; a rotated authorized_keys
// is honoured at the next login without a restart; SIGTERM stops the
// container with nothing left; the restarted container (fresh state
// directory) has the same host identity, from the mounted key; without a
// mounted key the script says the identity will change, and it does, and
// the CA line then refuses the worker's name to it.
func TestStartAgentAsPod(t *testing.T) {
	e2e.NoTree(t, "one host")
	roottest.RequireRoot(t)
	bed, err := testbed.New(t.Context(), testbed.Options{Prefix: "gwk", Hosts: 1, Subnet: 213, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := bed.Close(); err != nil {
			t.Errorf("bed Close: %v", err)
		}
	})
	addr := bed.Hosts()[0].Addr
	k1 := genKeys(t)
	k2 := genKeys(t)
	knownHosts := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(knownHosts, []byte(k1.KnownHosts([]string{addr}, agentPort)), 0o644); err != nil {
		t.Fatal(err)
	}
	hostKey := readFile(t, k1.HostKey)
	// The host certificate, as workers.yaml's comment makes it.
	ca := filepath.Join(t.TempDir(), "ca")
	certsScript(t, "ca", ca)
	certsScript(t, "host", ca, k1.HostPub, "gangway-worker-0.gangway-worker")
	hostCert := readFile(t, strings.TrimSuffix(k1.HostPub, ".pub")+"-cert.pub")
	sec := newSecret(t, map[string][]byte{"authorized_keys": readFile(t, k1.AuthorizedKeys), "ssh_host_ed25519_key": hostKey, "ssh_host_ed25519_key-cert.pub": hostCert})
	run := func(key string, args ...string) (string, string, int) {
		return runLauncher(t, append([]string{"-i", key, "--known-hosts", knownHosts, "-H", addr + ":2", "-np", "2"}, args...)...)
	}

	c := startContainer(t, bed, sec, "w0")
	out, stderr, code := run(k1.ClientKey, "sh", "-c",
		`sleep 0.3 & echo "rank $RANK pid1 $(cat /proc/1/comm)"; if touch "$GANGWAY_SECRETS/x" 2>/dev/null; then echo "rank $RANK secrets writable"; else echo "rank $RANK secrets read-only"; fi`)
	if code != 0 {
		t.Fatalf("job through start-agent.sh: exit code %d\n%s\n%s", code, out, stderr)
	}
	for r := range 2 {
		for _, want := range []string{fmt.Sprintf("rank %d pid1 agent", r), fmt.Sprintf("rank %d secrets read-only", r)} {
			if !strings.Contains(out, want) {
				t.Errorf("job output lacks %q:\n%s", want, out)
			}
		}
	}

	// As launcher-job.yaml dials workers: by DNS name (a hosts file
	// mounted over /etc/hosts in the launcher's mount namespace), with one
	// wildcard @cert-authority line for every worker.
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"+addr+" gangway-worker-0.gangway-worker\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wild := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(wild, []byte(certsScript(t, "known-hosts", ca, "[gangway-worker-*.gangway-worker]:22122")), 0o644); err != nil {
		t.Fatal(err)
	}
	launcherBin, _ := e2e.BuildBinaries(t)
	byName := func(key string) (string, string, int) {
		return runArgv(t, "unshare", "--mount", "/bin/sh", "-c", `mount --bind "$0" /etc/hosts && exec "$@"`, hosts,
			launcherBin, "-i", key, "--known-hosts", wild, "-H", "gangway-worker-0.gangway-worker:2", "-np", "2", "sh", "-c", `echo "rank $RANK on $GANGWAY_NAME"`)
	}
	out, stderr, code = byName(k1.ClientKey)
	if code != 0 || !strings.Contains(out, "rank 1 on w0") {
		t.Errorf("job by DNS name with the host CA's wildcard line: exit code %d\n%s\n%s", code, out, stderr)
	}

	// Rotation: the kubelet swaps ..data; the next login must see it.
	sec.update(t, map[string][]byte{"authorized_keys": readFile(t, k2.AuthorizedKeys), "ssh_host_ed25519_key": hostKey, "ssh_host_ed25519_key-cert.pub": hostCert})
	if out, stderr, code := run(k2.ClientKey, "true"); code != 0 {
		t.Errorf("the rotated key is refused: exit code %d\n%s\n%s", code, out, stderr)
	}
	if out, stderr, code := run(k1.ClientKey, "true"); code != 1 || !strings.Contains(stderr, "authentication refused") {
		t.Errorf("the key rotated out still logs in, or fails otherwise: exit code %d, want 1 and an authentication failure\n%s\n%s", code, out, stderr)
	}
	if kids := procscan.Children(c.unshare.Pid); len(kids) != 1 || kids[0] != c.init1 {
		t.Errorf("the agent restarted during the rotation: PID 1 was %d, now %v", c.init1, kids)
	}
	c.stop(t, bed)

	// Restart with a fresh state directory: the same identity, as the
	// launcher's strict known_hosts check shows.
	c = startContainer(t, bed, sec, "w0")
	if out, stderr, code := run(k2.ClientKey, "true"); code != 0 {
		t.Errorf("after a restart with the mounted host key: exit code %d\n%s\n%s", code, out, stderr)
	}
	if strings.Contains(c.unshare.Output(), "WARNING") {
		t.Errorf("start-agent.sh warned with a mounted host key:\n%s", c.unshare.Output())
	}
	c.stop(t, bed)

	// No mounted host key: a loud warning, and a new identity.
	bare := newSecret(t, map[string][]byte{"authorized_keys": readFile(t, k2.AuthorizedKeys)})
	c = startContainer(t, bed, bare, "w0")
	if !strings.Contains(c.unshare.Output(), "identity CHANGES") {
		t.Errorf("start-agent.sh did not warn that the identity will change:\n%s", c.unshare.Output())
	}
	if out, stderr, code := run(k2.ClientKey, "true"); code != 1 || !strings.Contains(stderr, "HOST KEY MISMATCH") {
		t.Errorf("a host without its mounted key was accepted, or failed otherwise: exit code %d, want 1 naming the host key\n%s\n%s", code, out, stderr)
	}
	// By the worker's name, this pod (no certificate) is an impostor.
	if out, stderr, code := byName(k2.ClientKey); code != 1 || !strings.Contains(stderr, "trusts only host certificates for it") {
		t.Errorf("a worker's name without the host certificate was accepted, or failed otherwise: exit code %d, want 1\n%s\n%s", code, out, stderr)
	}
	c.stop(t, bed)
}

// certsScript runs examples/certs.sh with args and returns its output.
func certsScript(t *testing.T, args ...string) string {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "..", "..", "..", "examples", "certs.sh"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(script, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("certs.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func genKeys(t *testing.T) sshtest.Keys {
	t.Helper()
	k, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// runLauncher runs the real launcher in the root namespace.
func runLauncher(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	launcherBin, _ := e2e.BuildBinaries(t)
	return runArgv(t, append([]string{launcherBin}, args...)...)
}

// runArgv runs argv (the launcher, perhaps through a wrapper that execs
// it) in its own process group, bounded by two minutes.
func runArgv(t *testing.T, argv ...string) (stdout, stderr string, code int) {
	t.Helper()
	args := argv[1:]
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var o, e bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], args...)
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	t0 := time.Now()
	err := cmd.Run()
	t.Logf("%s %s: %v", filepath.Base(argv[0]), strings.Join(args, " "), time.Since(t0).Round(time.Millisecond))
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("launcher still running after 2m; killed\n%s\n%s", o.String(), e.String())
	case errors.As(err, &ee):
		return o.String(), e.String(), ee.ExitCode()
	case err != nil:
		t.Fatalf("run launcher: %v", err)
	}
	return o.String(), e.String(), 0
}

// nsPids is the NSpid line of /proc/PID/status: the pid in each PID
// namespace, outermost first.
func nsPids(pid int) []string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if f, ok := strings.CutPrefix(l, "NSpid:"); ok {
			return strings.Fields(f)
		}
	}
	return nil
}

// inNS lists the live processes in the PID namespace ns (zombies
// included, as long as /proc shows them).
func inNS(ns string) []int {
	var out []int
	if ns == "" {
		return nil
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && l == ns {
			out = append(out, p)
		}
	}
	return out
}
