package e2e_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/launcher"
)

// TestSelftestLoopback: --selftest over 3 in-process agents on loopback
// addresses measures the 3 pairs both ways, judges the hosts and runs
// the job. Whether a loopback host comes out slow is the machine's
// load, not the launcher's doing (this package's tests run in parallel,
// and on two CPUs one pair was once under a third of the others), so the
// judgement is read, not asserted; --selftest=strict stopping a job for
// a slow host, and not for even ones, is nettest's TestSelftest, on
// links shaped with tc.
func TestSelftestLoopback(t *testing.T) {
	t.Parallel()
	c := e2e.StartLocal(t, 3)
	stdout, stderr, code := c.RunLauncher(t, fake(t, 3, c.HostList(1), "exit:0", "--selftest")...)
	if code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if want := "launcher: selftest: 3 pairs of 3 hosts, at most 64 MiB or 2s each way"; !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
	// "A (a) -> B (b)  N MB/s   B (b) -> A (a)  M MB/s": both ways
	// measured, with a figure each, and no error after them.
	pairLine := regexp.MustCompile(`^launcher: selftest:   (\S+ \(\S+\)) +-> (\S+ \(\S+\)) +([0-9.]+) MB/s   (\S+ \(\S+\)) +-> (\S+ \(\S+\)) +([0-9.]+) MB/s$`)
	pairs := 0
	for _, line := range strings.Split(stderr, "\n") {
		if !strings.HasPrefix(line, "launcher: selftest:   ") {
			continue
		}
		pairs++
		m := pairLine.FindStringSubmatch(line)
		if m == nil || m[1] != m[5] || m[2] != m[4] || m[1] == m[2] {
			t.Errorf("not a pair measured both ways: %q", line)
			continue
		}
		for _, v := range []string{m[3], m[6]} {
			if mbps, err := strconv.ParseFloat(v, 64); err != nil || mbps <= 0 {
				t.Errorf("a direction without a figure: %q", line)
			}
		}
	}
	if pairs != 3 {
		t.Errorf("%d pair lines, want 3:\n%s", pairs, stderr)
	}
	if !strings.Contains(stderr, "launcher: selftest: no outlier") && !strings.Contains(stderr, "launcher: selftest: slow hosts, under 33% of the median: ") {
		t.Errorf("stderr lacks the judgement of the hosts:\n%s", stderr)
	}
	t.Logf("stderr:\n%s", stderr)
}

// TestSelftestOneHost: with one host there is no pair; the launcher says
// so and runs the job.
func TestSelftestOneHost(t *testing.T) {
	e2e.NoTree(t, "one host")
	t.Parallel()
	c := e2e.StartLocal(t, 1)
	stdout, stderr, code := c.RunLauncher(t, fake(t, 2, c.HostList(2), "exit:0", "--selftest=strict")...)
	if code != 0 || !strings.Contains(stderr, "launcher: selftest: one host: no pair to measure\n") {
		t.Fatalf("exit code %d, want 0 and the one-host line\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// TestSelftestOldAgents: agents that do not serve the self-test are named
// and the launch refused before any frame of it reaches them.
func TestSelftestOldAgents(t *testing.T) {
	remote := fakeAgents(t, map[string]fakeAgent{})
	_, stderr, code := e2e.Run(t, launcher.Deps{Remote: remote}, "--selftest", "--timeout", "30", "-np", "2", "-H", "old1:1,old2:1", "true")
	if want := "--selftest: the agents on old1, old2 do not serve the fabric self-test"; code != 1 || !strings.Contains(stderr, want) {
		t.Fatalf("exit %d, want 1 and %q:\n%s", code, want, stderr)
	}
}

// TestHostileSelftest: an agent whose self-test answers are out of bounds
// (more bytes than asked, no time) is named and the job not started; an
// agent that never answers a send is named at the step's deadline (not
// run here: it is selftestWait, 22 s).
func TestHostileSelftest(t *testing.T) {
	honest := func(st wire.Selftest) wire.SelftestResult {
		if st.Op == wire.SelftestListen {
			return wire.SelftestResult{Op: st.Op, Port: 9}
		}
		return wire.SelftestResult{Op: st.Op, Target: st.Target, Bytes: st.Bytes, Took: 10 * time.Millisecond}
	}
	liar := func(st wire.Selftest) wire.SelftestResult {
		r := honest(st)
		if st.Op == wire.SelftestSend {
			r.Bytes, r.Took = 1<<50, 0
		}
		return r
	}
	remote := fakeAgents(t, map[string]fakeAgent{"honest": {selftest: honest}, "liar": {selftest: liar}})
	_, stderr, code := e2e.Run(t, launcher.Deps{Remote: remote}, "--selftest", "--timeout", "30", "-np", "2", "-H", "honest:1,liar:1", "true")
	if want := "host liar: selftest: a send's answer out of bounds"; code != 1 || !strings.Contains(stderr, want) {
		t.Fatalf("exit %d, want 1 and %q:\n%s", code, want, stderr)
	}
}
