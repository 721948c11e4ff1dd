package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/proc/proctest"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

// TestEnvAcrossHosts runs 3 in-process agents x 8 ranks and checks
// every rank's identity, rendezvous and host variables, and the tags.
func TestEnvAcrossHosts(t *testing.T) {
	t.Parallel()
	const hosts, np = 3, 3 * perHost
	c := e2e.StartLocal(t, hosts)
	vars := "RANK,LOCAL_RANK,WORLD_SIZE,MASTER_ADDR,MASTER_PORT,HOROVOD_HOSTNAME,GANGWAY_HOST"
	stdout, stderr, code := c.RunLauncher(t, fake(t, np, c.HostList(perHost), "env", "-x", "GANGWAY_FAKE_VARS="+vars)...)
	if code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	got := rankVars(t, stdout)
	if len(got) != np {
		t.Fatalf("output from %d ranks, want %d:\n%s", len(got), np, stdout)
	}
	port := got[0]["MASTER_PORT"]
	if n, err := strconv.Atoi(port); err != nil || n <= 0 {
		t.Errorf("MASTER_PORT %q is not a port", port)
	}
	for r := range np {
		h := c.Hosts[r/perHost]
		want := map[string]string{
			"RANK": strconv.Itoa(r), "LOCAL_RANK": strconv.Itoa(r % perHost), "WORLD_SIZE": strconv.Itoa(np),
			"MASTER_ADDR": c.Hosts[0].Addr, "MASTER_PORT": port,
			"HOROVOD_HOSTNAME": h.Addr, "GANGWAY_HOST": h.Addr,
		}
		for k, v := range want {
			if got[r][k] != v {
				t.Errorf("rank %d: %s=%q, want %q", r, k, got[r][k], v)
			}
		}
	}
	t.Logf("MASTER_ADDR=%s MASTER_PORT=%s", got[0]["MASTER_ADDR"], port)
}

// rankVars parses the fake "env" mode's tagged "[R] NAME=value" lines
// into each rank's variables; any other line, or a variable a rank
// printed twice, is an error.
func rankVars(t *testing.T, stdout string) map[int]map[string]string {
	t.Helper()
	got := map[int]map[string]string{}
	tagRE := regexp.MustCompile(`^\[(\d+)\] ([A-Z_]+)=(.*)$`)
	for _, l := range lines(stdout) {
		m := tagRE.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("untagged or unexpected line %q", l)
			continue
		}
		r, _ := strconv.Atoi(m[1])
		if got[r] == nil {
			got[r] = map[string]string{}
		}
		if _, dup := got[r][m[2]]; dup {
			t.Errorf("rank %d printed %s twice", r, m[2])
		}
		got[r][m[2]] = m[3]
	}
	return got
}

// TestExitCodeAcrossHosts: 3 hosts x 8 ranks; rank 21, on the third
// host, exits 5: the launcher returns 5, every other rank on every host
// is stopped, and the report counts the 23 its stop ended (through
// relays too, where each clean host's count goes up in its subtree's
// ends). The agents are processes, as users run them.
func TestExitCodeAcrossHosts(t *testing.T) {
	t.Parallel()
	const hosts, np, failing = 3, 3 * perHost, 2*perHost + 5
	_, agentBin := e2e.BuildBinaries(t)
	c := e2e.StartProcs(t, hosts, agentBin)
	trigger := filepath.Join(t.TempDir(), "fail")
	l := c.StartLauncher(t, fake(t, np, c.HostList(perHost), fmt.Sprintf("byrank:%d=failonfile:%s:5,*=sleep", failing, trigger), "--kill-grace", "5s")...)
	out, ok := l.Stdout.WaitFor(e2e.Deadline, e2e.HasReady(np))
	if !ok {
		t.Fatalf("not every rank started:\n%s\nstderr:\n%s", out, l.Stderr)
	}
	ready := e2e.ReadyPids(out)
	var rest []int
	for r := range np {
		if r != failing {
			rest = append(rest, r)
		}
	}
	others := pidsOf(t, ready, rest...)
	if left := proctest.WaitGone(0, others...); len(left) != len(others) {
		t.Fatalf("ranks gone before the failure: running %v of %v", left, others)
	}
	t0 := time.Now()
	if err := os.WriteFile(trigger, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code := l.Wait(t)
	took := time.Since(t0)
	stderr := l.Stderr.String()
	if code != 5 {
		t.Fatalf("exit code %d, want 5\nstderr:\n%s", code, stderr)
	}
	for _, want := range []string{fmt.Sprintf("rank %d on %s", failing, c.Hosts[2].Addr), "launcher: 23 other ranks were stopped\n"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if left := proctest.WaitGone(e2e.Deadline, others...); len(left) > 0 {
		t.Errorf("ranks still running after the launcher returned: %v", left)
	}
	t.Logf("failure to launcher exit: %v; other ranks stopped on all %d hosts", took.Round(time.Millisecond), hosts)
}

// TestSignalsEscalateAcrossHosts: 2 hosts x 8 ranks; the launcher's
// first SIGTERM reaches every rank on every host as SIGTERM; the second
// kills them all. The agents are processes, as users run them.
func TestSignalsEscalateAcrossHosts(t *testing.T) {
	t.Parallel()
	const np = 2 * perHost
	_, agentBin := e2e.BuildBinaries(t)
	c := e2e.StartProcs(t, 2, agentBin)
	l := c.StartLauncher(t, fake(t, np, c.HostList(perHost), "trapterm", "--kill-grace", "10m")...)
	out, ok := l.Stdout.WaitFor(e2e.Deadline, e2e.HasReady(np))
	if !ok {
		t.Fatalf("not every rank started:\n%s\nstderr:\n%s", out, l.Stderr)
	}
	pids := pidsOf(t, e2e.ReadyPids(out), span(0, np)...)
	l.Signal(syscall.SIGTERM)
	out, ok = l.Stdout.WaitFor(e2e.Deadline, func(s string) bool { return strings.Count(s, "] term ") >= np })
	if !ok {
		t.Fatalf("not every rank got SIGTERM:\n%s", out)
	}
	for r, p := range pids {
		if !strings.Contains(out, fmt.Sprintf("[%d] term %d\n", r, p)) {
			t.Errorf("rank %d (pid %d) did not report SIGTERM", r, p)
		}
	}
	t0 := time.Now()
	l.Signal(syscall.SIGTERM)
	if code := l.Wait(t); code != 128+15 {
		t.Errorf("exit code %d, want 143\nstderr:\n%s", code, l.Stderr)
	}
	if left := proctest.WaitGone(e2e.Deadline, pids...); len(left) > 0 {
		t.Errorf("ranks survived the second signal: %v", left)
	}
	t.Logf("second SIGTERM to launcher exit: %v", time.Since(t0).Round(time.Millisecond))
}

// sameMachineConfig writes an ssh configuration naming c's first agent
// dgx01 and dgx01.cluster.local and its second dgx02, each with its
// agent's port (as users give agents on a port of their own), and
// returns its path.
func sameMachineConfig(t *testing.T, c *e2e.Cluster) string {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "ssh_config")
	a, b := c.Hosts[0], c.Hosts[1]
	text := fmt.Sprintf("Host dgx01 dgx01.cluster.local\n    HostName %s\n    Port %d\nHost dgx02\n    HostName %s\n    Port %d\n", a.Addr, a.Port, b.Addr, b.Port)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return conf
}

// TestSSHConfigPort: agents reached on the Port of the user's ssh
// configuration, not --port: the preflight probes each host on that port
// too (it probed --port, found nothing listening and failed the launch),
// and the job of eight ranks on each host runs.
func TestSSHConfigPort(t *testing.T) {
	t.Parallel()
	c := e2e.StartLocal(t, 2)
	conf := sameMachineConfig(t, c)
	if _, stderr, code := c.RunLauncher(t, fake(t, 16, "dgx01:8,dgx02:8", "exit:0", "-F", conf)...); code != 0 {
		t.Errorf("exit code %d:\n%s", code, stderr)
	}
}

// TestSameMachineTwice: a host list that names one machine twice, as an
// ssh alias and as another name of it (dgx01 and dgx01.cluster.local),
// would put two sets of local ranks, GPUs 0-7 twice, on it. Its agent
// refuses the job's second name before any rank starts; the launcher
// fails at once, naming both entries.
func TestSameMachineTwice(t *testing.T) {
	t.Parallel()
	c := e2e.StartLocal(t, 2)
	conf := sameMachineConfig(t, c)
	_, stderr, code := c.RunLauncher(t, fake(t, 16, "dgx01:8,dgx01.cluster.local:8", "exit:0", "-F", conf, "--start-timeout", "10m")...)
	if code == 0 || !strings.Contains(stderr, `host entries "dgx01" and "dgx01.cluster.local" of this launch reach the same agent`) &&
		!strings.Contains(stderr, `host entries "dgx01.cluster.local" and "dgx01" of this launch reach the same agent`) {
		t.Errorf("exit code %d, want a failure naming both entries:\n%s", code, stderr)
	}
	if strings.Contains(stderr, "--start-timeout") {
		t.Errorf("waited for --start-timeout:\n%s", stderr)
	}
}

// TestProgressBarLive: a rank drawing a progress bar (tqdm's way: a
// carriage return, then the bar, no newline until the epoch ends) on
// two hosts of eight ranks: each state reaches the console, tagged, as
// soon as the next is drawn, not at the epoch's end. The ranks wait for
// the test to have seen their first state before they end the epoch, so
// the test proves it without timing anything.
func TestProgressBarLive(t *testing.T) {
	t.Parallel()
	c := e2e.StartLocal(t, 2)
	seen := filepath.Join(t.TempDir(), "seen")
	bar := `printf '\rstep 1/3 %s' "$RANK"; printf '\rstep 2/3 %s' "$RANK"
n=0; while [ ! -e "$SEEN" ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done
printf '\rstep 3/3 %s\n' "$RANK"`
	l := c.StartLauncher(t, "-l", "-np", "16", "-H", c.HostList(perHost), "-x", "SEEN="+seen, "sh", "-c", bar)
	allFirst := func(s string) bool {
		for r := range 16 {
			if !strings.Contains(s, fmt.Sprintf("[%d] step 1/3 %d\r", r, r)) {
				return false
			}
		}
		return true
	}
	if out, ok := l.Stdout.WaitFor(e2e.Deadline, allFirst); !ok {
		t.Fatalf("not every rank's first state reached the console before its epoch ended:\n%q", out)
	}
	if err := os.WriteFile(seen, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := l.Wait(t); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, l.Stderr.String())
	}
	out := l.Stdout.String()
	for r := range 16 {
		for _, want := range []string{fmt.Sprintf("[%d] step 2/3 %d\r", r, r), fmt.Sprintf("[%d] step 3/3 %d\n", r, r)} {
			if !strings.Contains(out, want) {
				t.Errorf("stdout lacks %q", want)
			}
		}
	}
}
