package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gangway-hpc/gangway/agent/proc/proctest"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

// The agent tree: with --tree-width the launcher reaches the first hosts
// itself and the others through relays, agents that log in to their
// children with a job certificate. These tests run the tree on purpose;
// `make test` also runs this whole package again with GANGWAY_TREE_WIDTH=1
// (every host behind the one before it), so every other test here passes
// through relays too.

// TestTreeJob: 7 hosts x 8 ranks through a tree of width 2 (3 levels):
// every rank runs once, on its host, with its own rank, world size and
// local rank, its output whole and in order, and the job exits 0.
func TestTreeJob(t *testing.T) {
	t.Parallel()
	const hosts, per = 7, perHost
	c := e2e.StartLocal(t, hosts)
	np := hosts * per
	vars := "RANK,LOCAL_RANK,WORLD_SIZE,GANGWAY_HOST"
	stdout, stderr, code := c.RunLauncher(t, fake(t, np, c.HostList(per), "env", "-x", "GANGWAY_FAKE_VARS="+vars, "--tree-width", "2", "-v")...)
	if code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !regexp.MustCompile(`agent tree.*"width": 2, "hosts": 7, "levels": 3`).MatchString(stderr) {
		t.Errorf("the launcher did not log a tree of width 2 and 3 levels over 7 hosts:\n%s", e2e.Tail(stderr, 4000))
	}
	got := rankVars(t, stdout)
	if len(got) != np {
		t.Fatalf("output from %d ranks, want %d", len(got), np)
	}
	for r := range np {
		want := map[string]string{"RANK": strconv.Itoa(r), "LOCAL_RANK": strconv.Itoa(r % per), "WORLD_SIZE": strconv.Itoa(np), "GANGWAY_HOST": c.Hosts[r/per].Addr}
		for k, v := range want {
			if got[r][k] != v {
				t.Errorf("rank %d: %s=%q, want %q", r, k, got[r][k], v)
			}
		}
	}
}

// TestTreeOutputOrder: every rank of 7 hosts x 8 behind relays prints
// 500 numbered lines; none is lost, mangled or out of order within its
// rank.
func TestTreeOutputOrder(t *testing.T) {
	t.Parallel()
	const hosts, per, n = 7, perHost, 500
	c := e2e.StartLocal(t, hosts)
	np := hosts * per
	script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "line $i of rank $RANK: 0123456789abcdefghijklmnopqrstuvwxyz"; i=$((i+1)); done`, n)
	stdout, stderr, code := c.RunLauncher(t, "-l", "-np", strconv.Itoa(np), "-H", c.HostList(per), "--tree-width", "2", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, stderr)
	}
	byRank := e2e.RankLines(stdout)
	if len(byRank) != np {
		t.Fatalf("output from %d ranks, want %d", len(byRank), np)
	}
	for r := range np {
		ls := byRank[r]
		if len(ls) != n {
			t.Errorf("rank %d: %d lines, want %d", r, len(ls), n)
		}
		for i, l := range ls {
			if want := fmt.Sprintf("line %d of rank %d: 0123456789abcdefghijklmnopqrstuvwxyz", i, r); l != want {
				t.Errorf("rank %d line %d: %q, want %q", r, i, l, want)
				break
			}
		}
	}
}

// TestDeadRelay: a dead host (nothing listens on its port) at the first
// level of a tree of width 2 over six hosts, with two live hosts behind
// it and 8 ranks a host: the launcher reaches the two around it, and the
// launch fails with status 1 after the grace naming the dead host alone,
// as a flat launch does, not the hosts behind it; no rank runs. The
// agents are processes, as users run them.
func TestDeadRelay(t *testing.T) {
	t.Parallel()
	_, agentBin := e2e.BuildBinaries(t)
	c := e2e.StartProcs(t, 5, agentBin)
	addr, port := c.Unused(t)
	dead := fmt.Sprintf("%s:%d", addr, port)
	// Width 2: the launcher reaches hosts 0 and 1 (the dead one); host 0
	// relays for hosts 2 and 3, host 1 for hosts 4 and 5.
	var hosts []string
	for i, h := range c.Hosts {
		hosts = append(hosts, fmt.Sprintf("%s:%d:%d", h.Addr, perHost, h.Port))
		if i == 0 {
			hosts = append(hosts, fmt.Sprintf("%s:%d:%d", addr, perHost, port))
		}
	}
	stdout, stderr, code := c.RunLauncher(t, fake(t, 6*perHost, strings.Join(hosts, ","), "exit:0", "--tree-width", "2", "-v")...)
	if code != 1 {
		t.Fatalf("exit code %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"a relay is down; the launcher reaches the hosts behind such relays itself",
		"launcher: ready 5/6; every other host is ready, waiting 10s more (--unreachable-grace) for " + dead + ": connection refused",
		"hosts still unreachable 10s after every other host was ready (--unreachable-grace 10s; give --start-timeout to wait for them longer): host " + addr + ": " + dead + ": connection refused",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, e2e.Tail(stderr, 6000))
		}
	}
	if strings.Contains(stderr, "is not connected yet") {
		t.Errorf("hosts named after their dead relay:\n%s", e2e.Tail(stderr, 6000))
	}
	if stdout != "" {
		t.Errorf("a rank ran although a host was missing:\n%s", stdout)
	}
}

// TestRelayKilled: 5 agent processes, tree width 2: the launcher holds
// hosts 0 and 1, host 0 relays for hosts 2 and 3, host 1 for host 4.
// SIGKILL host 0's agent mid-job: the launcher fails with 255 naming the
// relay and both hosts lost behind it (on one line, as the failures of
// their ranks), and no rank or child is left on any host.
func TestRelayKilled(t *testing.T) {
	t.Parallel()
	_, agentBin := e2e.BuildBinaries(t)
	const hosts = 5
	c := e2e.StartProcs(t, hosts, agentBin)
	j := startFaultJob(t, c, "--tree-width", "2", "--kill-grace", "5s")
	l, np, ranks, children, mark := j.l, j.np, j.ranks, j.children, j.mark
	all := treesOf(t, ranks, children, span(0, np)...)
	if err := c.Procs[0].Kill(); err != nil {
		t.Fatal(err)
	}
	code := l.Wait(t)
	stderr := l.Stderr.String()
	if code != 255 {
		t.Errorf("exit code %d, want 255 (agent lost)", code)
	}
	relay := c.Hosts[0].Addr
	// The hosts the relay cut off are named on one line, in job order,
	// and their ranks' failures read as one.
	if want := fmt.Sprintf("lost the agents on 2 hosts (%s, %s): cut off: their relay %s was lost", c.Hosts[2].Addr, c.Hosts[3].Addr, relay); !strings.Contains(stderr, want) {
		t.Errorf("stderr does not say %q:\n%s", want, stderr)
	}
	if want := fmt.Sprintf("ranks %d-%d on 2 hosts (%s, %s): lost the agent: cut off: its relay %s was lost", 2*perHost, 4*perHost-1, c.Hosts[2].Addr, c.Hosts[3].Addr, relay); !strings.Contains(stderr, want) {
		t.Errorf("stderr does not say %q:\n%s", want, stderr)
	}
	if want := "lost the agent on " + relay; !strings.Contains(stderr, want) {
		t.Errorf("stderr does not name the relay (%q):\n%s", want, stderr)
	}
	for _, h := range []int{1, 4} {
		if strings.Contains(stderr, "lost the agent on "+c.Hosts[h].Addr) {
			t.Errorf("host %d (not behind the relay) reported lost:\n%s", h, stderr)
		}
	}
	if left := proctest.WaitGone(e2e.Deadline, all...); len(left) > 0 {
		t.Errorf("ranks or children left running: %v", left)
	}
	if left := waitUnmarked(mark, e2e.Deadline); len(left) > 0 {
		t.Errorf("processes of the job left running:%s", describe(left))
	}
	t.Logf("launcher stderr:\n%s", stderr)
}

// TestRelayHung: as TestRelayKilled, but host 0's agent is stopped
// (SIGSTOP: a relay hung, its connections open and silent) instead of
// killed. The launcher's keepalives (its -F configuration: every second,
// lost after 3 unanswered) find the relay silent: exit 255, the relay
// named as the job's failure with the keepalives' words, and the two
// hosts behind it as cut off by it, on one line (not each as silent on
// its own). While the relay stays stopped, the hosts behind it stop
// their ranks (they hear no heartbeat for their --launcher-timeout), as
// do the hosts the launcher stopped; the relay's own ranks, whose agent
// cannot act, go once it is resumed.
func TestRelayHung(t *testing.T) {
	t.Parallel()
	_, agentBin := e2e.BuildBinaries(t)
	const hosts = 5
	c := e2e.StartProcs(t, hosts, agentBin, e2e.AgentArgs("--launcher-timeout", "10s"))
	conf := filepath.Join(t.TempDir(), "ssh_config")
	if err := os.WriteFile(conf, []byte("Host *\n    ServerAliveInterval 1\n    ServerAliveCountMax 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	j := startFaultJob(t, c, "-F", conf, "--tree-width", "2", "--kill-grace", "5s")
	l, np, ranks, children, mark := j.l, j.np, j.ranks, j.children, j.mark
	relayPid := c.Procs[0].Pid()
	if err := syscall.Kill(relayPid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := syscall.Kill(relayPid, syscall.SIGCONT); err != nil {
				t.Errorf("resume the relay's agent: %v", err)
			}
		}
	}
	t.Cleanup(resume) // before the cluster's own cleanup stops it
	code := l.Wait(t)
	stderr := l.Stderr.String()
	relay := c.Hosts[0].Addr
	silent := "no answer to SSH keepalives for 3s (host hung, stopped or cut off)"
	if code != 255 {
		t.Errorf("exit code %d, want 255 (agent lost)", code)
	}
	for _, want := range []string{
		fmt.Sprintf("launcher: job failed: ranks 0-%d on %s: lost the agent on %s: %s", perHost-1, relay, relay, silent),
		fmt.Sprintf("lost the agents on 2 hosts (%s, %s): cut off: their relay %s was lost (%s)", c.Hosts[2].Addr, c.Hosts[3].Addr, relay, silent),
		fmt.Sprintf("ranks %d-%d on 2 hosts (%s, %s): lost the agent: cut off: its relay %s was lost (%s)", 2*perHost, 4*perHost-1, c.Hosts[2].Addr, c.Hosts[3].Addr, relay, silent),
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
	for _, h := range []int{1, 2, 3, 4} {
		if strings.Contains(stderr, "lost the agent on "+c.Hosts[h].Addr+": no answer") {
			t.Errorf("host %d named silent on its own, not cut off by its relay:\n%s", h, stderr)
		}
	}
	// The relay still stopped: every other host's ranks and children end.
	if left := proctest.WaitGone(e2e.Deadline, treesOf(t, ranks, children, span(perHost, np)...)...); len(left) > 0 {
		t.Errorf("ranks or children left running on the hosts around and behind the hung relay: %v", left)
	}
	resume()
	if left := proctest.WaitGone(e2e.Deadline, treesOf(t, ranks, children, span(0, np)...)...); len(left) > 0 {
		t.Errorf("ranks or children left running once the relay resumed: %v", left)
	}
	if left := waitUnmarked(mark, e2e.Deadline); len(left) > 0 {
		t.Errorf("processes of the job left running:%s", describe(left))
	}
	t.Logf("launcher stderr:\n%s", stderr)
}

// TestTreeBarrier: 7 hosts x 8 ranks through a tree of width 2: every
// rank puts its key, enters a PMI barrier and finds every other rank's
// key. The relays combine their subtrees' fences (the launcher logs one
// fence per first-level relay, naming every host behind it) and the
// release spreads down.
func TestTreeBarrier(t *testing.T) {
	t.Parallel()
	const hosts, per = 7, perHost
	c := e2e.StartLocal(t, hosts)
	np := hosts * per
	release := filepath.Join(t.TempDir(), "release")
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := c.RunLauncher(t, "-v", "-l", "-np", strconv.Itoa(np), "-H", c.HostList(per), "--tree-width", "2",
		"-x", e2e.IsolatedEnv+"="+release, self(t))
	if code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", code, stdout, e2e.Tail(stderr, 60))
	}
	if strings.Contains(stdout, "PMI check failed") {
		t.Errorf("a rank's put, barrier or get failed:\n%s", stdout)
	}
	if n := len(e2e.IsolatedReady(stdout)); n != np {
		t.Errorf("%d ranks passed the barrier, want %d:\n%s", n, np, stdout)
	}
	// Hosts 0 and 1 are the launcher's; 0 relays for 2, 3 (and 2 for 6),
	// 1 for 4, 5: two subtree fences per barrier, of 4 and 3 hosts, each
	// named as spans (the launcher tells the relays it reaches itself to;
	// relay 2 names 2 and 6 to relay 0 as a list): 0, 2-3, 6 and 1, 4-5.
	fenceRE := regexp.MustCompile(`subtree fence.*"relay": "([0-9.]+)", "seq": 1, "hosts": (\d+), "spans": (\d+)`)
	got := map[string]string{}
	for _, m := range fenceRE.FindAllStringSubmatch(stderr, -1) {
		got[m[1]] = m[2] + " hosts in " + m[3] + " spans"
	}
	want := map[string]string{c.Hosts[0].Addr: "4 hosts in 3 spans", c.Hosts[1].Addr: "3 hosts in 2 spans"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("subtree fences of barrier 1 %v, want %v", got, want)
	}
}
