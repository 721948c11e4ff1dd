// Package treescale_test runs one job at the size the agent tree is for:
// 1,024 in-process agents on loopback addresses, through a tree of
// depth 3, and checks that the output stays whole and honest.
package treescale_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent"
	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/agent/sshd"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/cmd/internal/scalebed"
	"github.com/gangway-hpc/gangway/launcher"
)

// addr is agent i's loopback address: 127.77.<i/250>.<i%250+1>, apart
// from agenttest's 127.0.B.x and gwbench's 127.0.190-199.x.
func addr(i int) string { return fmt.Sprintf("127.77.%d.%d", i/250, i%250+1) }

// startAgents starts n agents in this process, each an sshd.Server on its
// own address and an ephemeral port; it returns the hostfile and the
// known_hosts file that reach them.
func startAgents(t *testing.T, n int) (keys sshtest.Keys, hostfile, knownHosts string) {
	t.Helper()
	dir := t.TempDir()
	keys, err := sshtest.GenKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var hf, kh strings.Builder
	pub := strings.TrimSpace(string(must(os.ReadFile(keys.HostPub))))
	for i := range n {
		l, err := net.Listen("tcp", net.JoinHostPort(addr(i), "0"))
		if err != nil {
			t.Fatalf("agent %d: %v", i, err)
		}
		a := &agent.Agent{Name: "t" + strconv.Itoa(i), Version: "treescale", Log: zap.NewNop()}
		srv := &sshd.Server{Subsystem: a.ServeLogin, Log: zap.NewNop(), HostKey: keys.HostSigner, AuthorizedKeys: keys.AuthorizedKeys,
			StartupLimits: scalebed.Limits}
		wg.Go(func() { _ = srv.Serve(ctx, l) })
		port := l.Addr().(*net.TCPAddr).Port
		fmt.Fprintf(&hf, "%s slots=1 port=%d\n", addr(i), port)
		fmt.Fprintf(&kh, "[%s]:%d %s\n", addr(i), port, pub)
	}
	hostfile, knownHosts = filepath.Join(dir, "hosts"), filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(hostfile, []byte(hf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(knownHosts, []byte(kh.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return keys, hostfile, knownHosts
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// The bed's bounds (scalebed): 1,024 agents, their relays' logins and
// the launcher share this test's process and two CPUs, under -race and
// beside another package's tests in the full suite (on a machine whose
// system calls take 1 us the test failed there, exit 255, and passed
// alone). This test is about what the tree carries, not liveness.

// The preflight is left out (--preflight=false): its probes are TCP
// connects bounded at 5 s, a real node's bound, and in the full suite
// one of the 1,024 loopback probes, dialed from this process, once went
// unanswered that long; the preflight has tests of its own (nettest),
// and gwbench's scale rows run it at up to 10,000 hosts.

// runLimit bounds one launch of 1,024 hosts (about 20 s each on a quiet
// 2-core machine, agents, ranks and launcher all on it).
const runLimit = 5 * time.Minute

// lines each rank prints, and its throughput: a fixed figure per rank,
// so that a summary is the same whatever carried the lines.
const lines = 100

const script = `i=0; while [ $i -lt ` + "100" + ` ]; do echo "line $i of rank $RANK: 0123456789abcdefghijklmnopqrstuvwxyz"; i=$((i+1)); done; echo "total images/sec: $((100 + RANK % 7)).25"`

// TestOutputThroughDeepTree: 1,024 hosts x 1 rank through a tree of width
// 10 (3 levels: 10, 100, 914 hosts): every rank's 100 lines arrive, none
// lost, mangled or out of order, and the throughput summary's total and
// per-host figures are those of the same job launched flat.
func TestOutputThroughDeepTree(t *testing.T) {
	if testing.Short() {
		t.Skip("1,024 agents: not with -short")
	}
	const n, width = 1024, "10"
	keys, hostfile, knownHosts := startAgents(t, n)
	sshConfig := filepath.Join(t.TempDir(), "ssh_config")
	if err := os.WriteFile(sshConfig, []byte(scalebed.SSHConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(width string) (stdout, summary string) {
		args := []string{"-F", sshConfig, "-i", keys.ClientKey, "--known-hosts", knownHosts, "-hostfile", hostfile, "-l", "--tree-width", width,
			"--start-timeout", "5m", "--preflight=false", "-np", strconv.Itoa(n), "sh", "-c", script}
		l := e2e.Start(t, launcher.Deps{}, args...)
		select {
		case <-l.Done():
		case <-time.After(runLimit):
			t.Fatalf("--tree-width %s: the launcher did not finish within %v (goroutines: %s)\nstderr:\n%s", width, runLimit, dumpGoroutines(), e2e.Tail(l.Stderr.String(), 4000))
		}
		stdout, stderr, code := l.Stdout.String(), l.Stderr.String(), l.Code()
		if code != 0 {
			t.Fatalf("--tree-width %s: exit code %d\nstderr:\n%s\n%s", width, code, e2e.Head(stderr, 3000), e2e.Tail(stderr, 2000))
		}
		// The summary follows the "bench: N ranks on H hosts, T s" line,
		// whose time differs from run to run.
		i := strings.Index(stdout, "\nbench: ")
		j := -1
		if i >= 0 {
			j = strings.Index(stdout[i+1:], "\n")
		}
		if i < 0 || j < 0 {
			t.Fatalf("--tree-width %s: no throughput summary:\n%s\nstderr:\n%s", width, e2e.Tail(stdout, 20), e2e.Tail(stderr, 20))
		}
		return stdout[:i+1], stdout[i+1+j+1:]
	}
	stdout, tree := run(width)
	checkLines(t, "tree", stdout, n)
	stdout, flat := run("0")
	checkLines(t, "flat", stdout, n)
	if tree != flat {
		t.Errorf("the summary through the tree differs from the flat launch's:\ntree:\n%s\nflat:\n%s", tree, flat)
	}
	t.Logf("%d ranks x %d lines through a tree of width 10 (depth 3): all in order; summary as flat:\n%s", n, lines, tree)
}

// checkLines checks that each of n ranks printed its numbered lines, in
// order and whole, then its throughput line.
func checkLines(t *testing.T, what, stdout string, n int) {
	t.Helper()
	byRank := e2e.RankLines(stdout)
	if len(byRank) != n {
		t.Errorf("%s: output from %d ranks, want %d", what, len(byRank), n)
	}
	bad := 0
	for r := range n {
		ls := byRank[r]
		want := make([]string, 0, lines+1)
		for i := range lines {
			want = append(want, fmt.Sprintf("line %d of rank %d: 0123456789abcdefghijklmnopqrstuvwxyz", i, r))
		}
		want = append(want, fmt.Sprintf("total images/sec: %d.25", 100+r%7))
		if !slices.Equal(ls, want) {
			bad++
			t.Errorf("%s: rank %d printed %d lines, not its %d in order (last: %q)", what, r, len(ls), len(want), ls[max(len(ls)-1, 0):])
		}
		if bad > 10 {
			t.Fatalf("%s: more than 10 ranks wrong", what)
		}
	}
}

// dumpGoroutines writes every goroutine's stack (the launcher's and the
// agents', all in this process) to a file left for the reader, and
// names it: what a hang at this size is waiting on.
func dumpGoroutines() string {
	f, err := os.CreateTemp("", "treescale-*.goroutines")
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	_ = pprof.Lookup("goroutine").WriteTo(f, 1)
	return f.Name()
}
