package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/gangway-hpc/gangway/agent/wire"
)

func TestStaleErrorDir(t *testing.T) {
	alive := func(pid int, start uint64) bool { return pid == 100 && start == 5 }
	for _, tt := range []struct {
		name  string
		stale bool
	}{
		{"gangway-100.5-job1-errors-123", false}, // its agent runs
		{"gangway-100.6-job1-errors-123", true},  // the pid now names a later process
		{"gangway-200.5-job1-errors-123", true},
		{"gangway-job1-errors-123", false},      // the older form: whose, unknown
		{"gangway-200.5-job1-other-123", false}, // not an error-file directory
		{"other-200.5-job1-errors-123", false},
		{"gangway-0.5-job-errors-1", false},
		{"gangway-x.5-job-errors-1", false},
		{"gangway-200.y-job-errors-1", false},
		{"gangway-", false},
	} {
		if got := staleErrorDir(tt.name, alive); got != tt.stale {
			t.Errorf("staleErrorDir(%q) = %v, want %v", tt.name, got, tt.stale)
		}
	}
}

// TestErrorDirsOfDeadAgentsGo: an agent's first job removes the
// error-file directories that dead agents left (named after a pid that
// has ended), and leaves its own, a live agent's and another user's.
func TestErrorDirsOfDeadAgentsGo(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	base := errorFileBase()
	mk := func(name string) string {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Join(p, "ranks"), 0o700); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(p) })
		return p
	}
	deadID := "gangway-" + strconv.Itoa(dead.Process.Pid) + ".1-"
	stale := mk(deadID + "swept-errors-x")
	live := mk(errorDirPrefix() + "live-errors-x")
	others := mk(deadID + "others-errors-x")
	if os.Geteuid() == 0 {
		if err := os.Chown(others, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	a := &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t)}
	c := serve(t, a)
	c.startJob(wire.StartJob{JobID: "sweep", Ranks: []wire.RankSpec{{Rank: 0, Argv: []string{"/bin/true"}}}})
	for m := c.next(); m.Kind != wire.KindDone; m = c.next() {
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("a dead agent's %s is still there: %v", stale, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live agent's %s: %v", live, err)
	}
	if _, err := os.Stat(others); os.Geteuid() == 0 && err != nil {
		t.Errorf("another user's %s: %v", others, err)
	}
}

// TestSweepAsksOncePerProcess: a sweep over many directories of few
// agent processes reads each process's liveness once.
func TestSweepAsksOncePerProcess(t *testing.T) {
	calls := map[string]int{}
	alive := onceEach(func(pid int, start uint64) bool {
		calls[fmt.Sprint(pid, ".", start)]++
		return pid == 100
	})
	stale := 0
	for j := range 1000 {
		for _, id := range []string{"100.5", "200.5", "200.6"} {
			if staleErrorDir(fmt.Sprintf("gangway-%s-job%d-errors-%d", id, j, j), alive) {
				stale++
			}
		}
	}
	if stale != 2000 {
		t.Errorf("%d stale directories, want 2000", stale)
	}
	if len(calls) != 3 || calls["100.5"] != 1 || calls["200.5"] != 1 || calls["200.6"] != 1 {
		t.Errorf("liveness asked %v, want once per process", calls)
	}
}
