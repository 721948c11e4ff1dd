// Package e2e_test holds the launcher's end-to-end tests on loopback: the
// real launcher, in process or as bin/launcher, against several agents, in
// process or as bin/agent processes (cmd/internal/e2e), with this test
// binary as the rank program. Tests with network-namespace hosts are in
// the nettest and hostnet packages below.
package e2e_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"gangway/agent/proc"
	"gangway/agent/proc/proctest"
	"gangway/cmd/internal/e2e"
)

// TestMain lets the test binary double as the rank program (launcher
// arguments -x GANGWAY_FAKE=mode make a rank act out a proctest mode) and
// as the ranks' supervisor for in-process agents.
func TestMain(m *testing.M) {
	if code, ok := proc.Supervise(os.Args); ok {
		os.Exit(code)
	}
	proctest.HelperMain()
	e2e.HelperMain() // an isolated rank, or a careless parent of a launcher
	code := m.Run()
	e2e.RemoveBinaries()
	os.Exit(code)
}

// self is the test binary, the rank program.
func self(t testing.TB) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fake returns launcher arguments running np ranks of the test binary in
// a proctest mode over hosts, after extra launcher options. It asks for
// [R] tags (-l): the tests find ranks' "ready PID" lines by them, and
// the launcher tags only a terminal by default.
func fake(t testing.TB, np int, hosts, mode string, opts ...string) []string {
	args := append([]string{"-l", "-np", strconv.Itoa(np), "-H", hosts, "-x", proctest.Env + "=" + mode}, opts...)
	return append(args, self(t))
}

// pidsOf returns the pids of the given ranks.
func pidsOf(t testing.TB, ready map[int]int, ranks ...int) []int {
	t.Helper()
	var out []int
	for _, r := range ranks {
		p, ok := ready[r]
		if !ok {
			t.Fatalf("rank %d printed no ready line", r)
		}
		out = append(out, p)
	}
	return out
}

// lines splits output into non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}
