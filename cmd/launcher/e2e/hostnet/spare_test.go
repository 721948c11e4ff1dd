//go:build linux

package hostnet

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/bench"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed/roottest"
)

// TestSpareReplacesLostHost: a real PyTorch DDP job (gloo) on hosts 0-3
// with host 4 as the spare (--spares 1) checkpoints every 5 steps; once
// the first checkpoint is written, host 1's agent is killed as a node
// crash would end it. The launcher blames host 1 (its agent lost), leaves
// it out, and runs the next attempt on hosts 0, 2, 3 and the spare, world
// size 4 throughout: every rank resumes from the checkpoint and finishes
// with w = 0.8^20. The report lists both attempts' hosts and host 1 left
// out as lost, with the spare named. Nothing is left running anywhere.
func TestSpareReplacesLostHost(t *testing.T) {
	t.Parallel()
	roottest.RequireRoot(t)
	needTorch(t)
	script, err := filepath.Abs("testdata/ddp_resume.py")
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, "gwr0", 27, 5)
	agents := c.startAgents(t)
	dir := t.TempDir()
	ckpt, report := filepath.Join(dir, "ckpt.pt"), filepath.Join(dir, "report.json")

	// The crash: host 1's agent, SIGKILLed once the first checkpoint exists.
	killed := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(jobTimeout)
		for time.Now().Before(deadline) {
			if _, err := os.Stat(ckpt); err == nil {
				killed <- syscall.Kill(agents[1].Pid, syscall.SIGKILL)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		killed <- fmt.Errorf("no checkpoint within %v", jobTimeout)
	}()
	l := runLauncher(t, append(c.conn(c.hostList(1)), "-np", "4", "--spares", "1", "--max-restarts", "1", "--restart-backoff", "0.5",
		"--report", report, "-x", "CKPT="+ckpt, "-x", "STEP_SLEEP=0.3", debianPython, script)...)
	t.Logf("launcher: %v", l)
	if err := <-killed; err != nil {
		t.Fatal(err)
	}
	<-agents[1].Done()
	if l.code != 0 {
		t.Fatalf("exit code %d, want 0 after the spare took host 1's place", l.code)
	}
	h := func(i int) string { return c.hosts[i].Addr }
	out, errOut := l.stdout.String(), l.stderr.String()
	for r := range 4 {
		if want := fmt.Sprintf("rank %d attempt 1 world 4 final w 0.011529", r); !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	if want := "launcher: leaving out " + h(1) + " (lost the agent on " + h(1); !strings.Contains(errOut, want) ||
		!strings.Contains(errOut, "spare "+h(4)+" takes its place") {
		t.Errorf("stderr does not say host 1 is left out and the spare takes its place:\n%s", e2e.Tail(errOut, 3000))
	}

	raw, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Attempts) != 2 {
		t.Fatalf("report has %d attempts, want 2:\n%s", len(rep.Attempts), raw)
	}
	a0, a1 := rep.Attempts[0], rep.Attempts[1]
	if want := []string{h(0), h(1), h(2), h(3)}; !slices.Equal(a0.Hosts, want) || len(a0.LeftOut) != 0 {
		t.Errorf("first attempt: hosts %v left out %v, want %v and none", a0.Hosts, a0.LeftOut, want)
	}
	if want := []string{h(0), h(2), h(3), h(4)}; !slices.Equal(a1.Hosts, want) {
		t.Errorf("second attempt ran on %v, want %v", a1.Hosts, want)
	}
	if lo := a1.LeftOut; len(lo) != 1 || lo[0].Host != h(1) || lo[0].Spare != h(4) || !strings.Contains(lo[0].Why, "lost the agent") {
		t.Errorf("second attempt's left_out %+v, want host 1 lost, spare host 4", lo)
	}
	live := slices.Clone(agents)
	live[1] = nil
	c.waitOnlyLiveAgents(t, live)
}

// TestSpareAtDGXShape: the spare path at a DGX node's shape, 8 ranks on
// each of 2 hosts with a third as the spare (--spares 1), the ranks a
// shell that waits in attempt 0 and exits 0 in attempt 1. Once all 16
// run, host 1's agent is SIGKILLed as a crashed node's would be: the
// launcher blames host 1, leaves it out, and starts the second attempt's
// 16 ranks on host 0 and the spare, 8 on each (local ranks 0-7), world
// size 16 throughout; it exits 0, and nothing is left on any host.
// (TestSpareReplacesLostHost does the same with a real PyTorch job at
// one rank a host: 16 torch imports twice are more than the two-CPU CI
// can give every test.)
func TestSpareAtDGXShape(t *testing.T) {
	t.Parallel()
	roottest.RequireRoot(t)
	c := newCluster(t, "gwr1", 28, 3)
	agents := c.startAgents(t)
	dir := t.TempDir()
	rank := `echo "ready $$ attempt $TORCHELASTIC_RESTART_COUNT rank $RANK of $WORLD_SIZE local $LOCAL_RANK host $GANGWAY_HOST"
touch "$0/ready.$TORCHELASTIC_RESTART_COUNT.$RANK"
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exec sleep 300; fi`

	// The crash: host 1's agent, SIGKILLed once all 16 ranks run.
	killed := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(jobTimeout)
		for time.Now().Before(deadline) {
			if marks, _ := filepath.Glob(filepath.Join(dir, "ready.0.*")); len(marks) == 16 {
				killed <- syscall.Kill(agents[1].Pid, syscall.SIGKILL)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		killed <- fmt.Errorf("16 ranks not running within %v", jobTimeout)
	}()
	hosts := c.hosts[0].Addr + ":8," + c.hosts[1].Addr + ":8," + c.hosts[2].Addr + ":8"
	l := runLauncher(t, append(c.conn(hosts), "-np", "16", "--spares", "1", "--max-restarts", "1", "--restart-backoff", "0.5",
		"/bin/sh", "-c", rank, dir)...)
	if err := <-killed; err != nil {
		t.Fatal(err)
	}
	<-agents[1].Done()
	if l.code != 0 {
		t.Fatalf("exit code %d, want 0 after the spare took host 1's place: %v", l.code, l)
	}
	h := func(i int) string { return c.hosts[i].Addr }
	errOut := l.stderr.String()
	if want := "launcher: leaving out " + h(1) + " (lost the agent on " + h(1); !strings.Contains(errOut, want) ||
		!strings.Contains(errOut, "spare "+h(2)+" takes its place") {
		t.Errorf("stderr does not say host 1 is left out and the spare takes its place:\n%s", e2e.Tail(errOut, 3000))
	}
	// Attempt 1: ranks 0-7 on host 0, 8-15 on the spare, local ranks
	// 0-7 on each.
	got := map[string]bool{}
	for _, line := range strings.Split(l.stdout.String(), "\n") {
		if i := strings.Index(line, "ready "); i >= 0 && strings.Contains(line, " attempt 1 ") {
			got[strings.Join(strings.Fields(line[i:])[2:], " ")] = true
		}
	}
	for r := range 16 {
		host := h(0)
		if r >= 8 {
			host = h(2)
		}
		if want := fmt.Sprintf("attempt 1 rank %d of 16 local %d host %s", r, r%8, host); !got[want] {
			t.Errorf("attempt 1 lacks %q", want)
		}
	}
	if len(got) != 16 {
		t.Errorf("attempt 1 started %d distinct ranks, want 16:\n%s", len(got), e2e.Tail(l.stdout.String(), 3000))
	}
	live := slices.Clone(agents)
	live[1] = nil
	c.waitOnlyLiveAgents(t, live)
}
