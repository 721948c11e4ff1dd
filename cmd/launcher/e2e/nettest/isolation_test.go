package nettest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/agenttest"
	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/agent/proc/proctest"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
)

// isolationRanks is the ranks per host in the isolation tests: a DGX's
// eight GPUs.
const isolationRanks = 8

// TestRanksIsolated: each rank alone on a busy host. Agents started by a
// careless parent (SIGHUP and SIGPIPE ignored, SIGUSR2 blocked, a stray
// pipe without close-on-exec: e2e.DirtyEnv) run 8 isolated ranks
// (e2e.HelperMain) on each of 2 namespace hosts, as root and as an
// ordinary user, once with the job's supervisor alone (--cgroup=false)
// and once in the job's cgroup too (the hosts get cgroup2 mounted where
// a real host has it). Each rank and its child hold exactly their own
// descriptors with default signals (e2e.CheckIsolated), and no rank's
// forged writes reach another rank's tag, output file or PMI stream
// (e2e.CheckForged). The same holds for a stock SSH session's command on
// such an agent, and for ranks under `agent --stdio` started by sshd
// (--transport ssh).
func TestRanksIsolated(t *testing.T) {
	agentBin, launcherBin := binaries(t)
	b := newBed(t, testbed.Options{Prefix: "gwn9", Hosts: 2, Subnet: 189})
	keys, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	agenttest.RequireRoot(t)
	u := agenttest.NewUser(t, "")
	userKeys := u.NewKeys(t)
	rankBin := copyTestBinary(t)
	type agentKind struct {
		name   string
		port   int
		cgroup bool
	}
	kinds := []agentKind{{"Supervisor", agentPort, false}, {"Cgroup", agentPort + 1, true}}
	var addrs []string
	for _, h := range b.Hosts() {
		addrs = append(addrs, h.Addr)
	}
	var kh strings.Builder
	for _, k := range kinds {
		for i, h := range b.Hosts() {
			startDirtyAgent(t, b, i, agentBin, k.cgroup, "--listen", h.Addr+":"+strconv.Itoa(k.port),
				"--host-key", keys.HostKey, "--authorized-keys", keys.AuthorizedKeys,
				"--name", "h"+strconv.Itoa(i), "--log-format", "console", "--cgroup="+strconv.FormatBool(k.cgroup))
		}
		kh.WriteString(keys.KnownHosts(addrs, k.port))
		kh.WriteString(keys.KnownHosts(addrs, 22))
	}
	known := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(known, []byte(kh.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, k := range kinds {
		for _, who := range []string{"Root", "User"} {
			t.Run(k.name+"/"+who, func(t *testing.T) {
				var hosts []string
				key := keys.ClientKey
				for _, a := range addrs {
					h := fmt.Sprintf("%s:%d:%d", a, isolationRanks, k.port)
					if who == "User" {
						h = u.Name + "@" + h
					}
					hosts = append(hosts, h)
				}
				if who == "User" {
					key = userKeys.ClientKey
				}
				runIsolated(t, launcherBin, rankBin, k.cgroup, "-i", key, "--known-hosts", known, "-H", strings.Join(hosts, ","))
			})
		}
	}
	t.Run("StockSSH", func(t *testing.T) {
		// What an SSH client's command holds on a dirty agent: its stdio.
		ssh := exec.Command("ssh", append(sshtest.SSHArgs(keys, agentPort), "root@"+addrs[0], "echo pid $$; exec sleep 600")...)
		out, err := ssh.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := ssh.Start(); err != nil {
			t.Fatal(err)
		}
		defer ssh.Wait()
		defer ssh.Process.Kill()
		line, err := bufio.NewReader(out).ReadString('\n')
		pid, perr := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "pid ")))
		if err != nil || perr != nil {
			t.Fatalf("ssh command said %q: %v", line, err)
		}
		// Once the shell has become sleep: until its exec, bash itself
		// ignores SIGQUIT for a moment.
		for i := 0; i < 500 && procComm(pid) != "sleep"; i++ {
			time.Sleep(10 * time.Millisecond)
		}
		// sleep's own start may still hold a locale file for a moment
		// (seen: fd 3 on .../C.utf8/LC_NUMERIC); a descriptor the agent
		// leaked would stay.
		fds := proctest.Fds(pid)
		for i := 0; i < 200 && len(fds) > 3; i++ {
			time.Sleep(10 * time.Millisecond)
			fds = proctest.Fds(pid)
		}
		if len(fds) != 3 || fds[0] == "" || fds[1] == "" || fds[2] == "" {
			t.Errorf("the command (pid %d) holds %v, want its stdio alone", pid, fds)
		}
		if blk, ign := e2e.StatusOf(pid); blk != "0000000000000000" || ign != "0000000000000000" {
			t.Errorf("the command (pid %d): SigBlk %s, SigIgn %s; want none", pid, blk, ign)
		}
		_ = ssh.Process.Kill()
		if left := proctest.WaitGone(jobTimeout, pid); len(left) > 0 {
			t.Errorf("the command %d still runs after its client went", pid)
		}
	})
	t.Run("TransportSSH", func(t *testing.T) {
		// sshd starts agent --stdio, whose supervisor starts the ranks.
		var hosts []string
		for i, a := range addrs {
			if _, err := b.StartSSHD(t.Context(), i, 22, keys); err != nil {
				t.Fatal(err)
			}
			hosts = append(hosts, fmt.Sprintf("%s:%d:22", a, isolationRanks))
		}
		runIsolated(t, launcherBin, rankBin, false, "--transport", "ssh",
			"--ssh", "ssh -F /dev/null -o IdentitiesOnly=yes -o LogLevel=ERROR -o KexAlgorithms=curve25519-sha256",
			"--agent-path", agentBin, "-i", keys.ClientKey, "--known-hosts", known, "-H", strings.Join(hosts, ","))
	})
}

// runIsolated runs one job of isolated ranks with the launcher flags
// given, 8 per host on 2 hosts, and checks it while the ranks wait and
// after they end.
func runIsolated(t *testing.T, launcherBin, rankBin string, cgroup bool, flags ...string) {
	t.Helper()
	np := 2 * isolationRanks
	tag := newTag(t)
	outDir := filepath.Join(t.TempDir(), "out")
	release := filepath.Join(binDir, tag+".release") // where another user's ranks can see it
	t.Cleanup(func() { os.Remove(release) })
	args := append(flags, "-l", "-np", strconv.Itoa(np), "--output-filename", outDir, "-wdir", "/tmp",
		"-x", tagEnv+"="+tag, "-x", e2e.IsolatedEnv+"="+release, rankBin)
	l := start(t, nil, launcherBin, args...)
	deadline := time.Now().Add(jobTimeout)
	for len(e2e.IsolatedReady(l.stdout.String())) < np {
		if time.Now().After(deadline) {
			t.Fatalf("not every rank got ready: %v", l)
		}
		select {
		case <-l.done:
			t.Fatalf("launcher exited before every rank got ready: %v", l)
		case <-time.After(20 * time.Millisecond):
		}
	}
	e2e.CheckIsolated(t, e2e.IsolatedReady(l.stdout.String()), cgroup)
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !l.wait(jobTimeout) {
		t.Fatalf("launcher still running after the release: %v", l)
	}
	if l.code != 0 {
		t.Fatalf("launcher: %v", l)
	}
	waitNoTagged(t, tag, 10*time.Second)
	e2e.CheckForged(t, l.stdout.String(), outDir, np)
}

// startDirtyAgent starts an agent in host i through this test binary as
// a careless parent (e2e.DirtyEnv), with cgroup2 mounted in the host when
// cgroup is set.
func startDirtyAgent(t *testing.T, b *testbed.Bed, i int, agentBin string, cgroup bool, args ...string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := b.Command(t.Context(), i, self, append([]string{agentBin}, args...)...)
	tmp, err := os.MkdirTemp(binDir, b.Hosts()[i].NS+"-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(append(os.Environ(), e2e.DirtyEnv(cgroup)...), "TMPDIR="+tmp)
	p, err := b.StartCmd(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent h%d (%s) output:\n%s", i, p, e2e.Tail(p.Output(), 4000))
		}
	})
	waitBanner(t, args[1], p)
}

// copyTestBinary copies this test binary where any user may run it (the
// go tool's build directory is root's alone), once per process.
func copyTestBinary(t *testing.T) string {
	t.Helper()
	return rankCopy.get(t, "a copy of the test binary for ranks", func() (string, error) {
		self, err := os.Executable()
		if err != nil {
			return "", err
		}
		b, err := os.ReadFile(self)
		if err != nil {
			return "", err
		}
		dst := filepath.Join(binDir, "nettest-rank")
		return dst, os.WriteFile(dst, b, 0o755)
	})
}

var rankCopy built

// procComm is /proc/PID/comm, "" when the process is gone.
func procComm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}
