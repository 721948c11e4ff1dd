package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// restartScript fails rank 1 with code 3 in the first attempt only; every
// rank prints its torchrun restart contract. Given SYNC (a directory), rank
// 1 fails only once rank 0 has printed (at most 20 s later): a loaded
// machine may start rank 0 after rank 1 has failed.
const restartScript = `echo "attempt $TORCHELASTIC_RESTART_COUNT of $TORCHELASTIC_MAX_RESTARTS run $TORCHELASTIC_RUN_ID port $MASTER_PORT"
if [ -n "$SYNC" ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  if [ "$RANK" = 0 ]; then touch "$SYNC/0"; else n=0; while [ ! -e "$SYNC/0" ] && [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done; fi
fi
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then printf '10\timages/sec: 50.0 +/- 0.0 (jitter = 0.0)\t7.0\n'; sleep 0.5; echo "rank 1 gives up" >&2; exit 3; fi
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exec sleep 30; fi`

// TestRestartWholeGang: with --max-restarts 1, rank 1's failure stops the
// gang and starts it again; the second attempt succeeds, the launcher exits
// 0, every rank saw the restart count and the run id, and --report lists
// both attempts. Without restarts the same job fails with rank 1's code.
func TestRestartWholeGang(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	report := filepath.Join(dir, "r.json")
	l := startLauncher(t, false, "-l", "-np", "2", "--max-restarts", "1", "--restart-backoff", "0.1", "--run-id", "run42",
		"--report", report, "-x", "SYNC="+t.TempDir(), "sh", "-c", restartScript)
	assertCode(t, l, 0)
	out, errOut := l.stdout(), l.stderr()
	for _, want := range []string{"[0] attempt 0 of 1 run run42", "[1] attempt 0 of 1 run run42", "[0] attempt 1 of 1 run run42", "[1] attempt 1 of 1 run run42"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{"launcher: job failed: rank 1 on localhost", "exited with code 3",
		"launcher: restarting the whole gang in 100ms (restart 1 of 1, run run42)"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, "launcher: exit code") {
		t.Errorf("a restarted attempt's exit code was printed as the launcher's:\n%s", errOut)
	}
	rep := readReport(t, report) // schema-checked
	if a := rep.Attempts; len(a) != 2 || a[0].Rank == nil || *a[0].Rank != 1 || a[0].Host != "localhost" || a[0].ExitCode != 3 ||
		!strings.Contains(a[0].Cause, "exited with code 3") || a[1].N != 1 || a[1].Cause != "" || a[1].ExitCode != 0 {
		t.Errorf("attempts in the report: %+v", a)
	}
	// Goodput: the first attempt counts up to rank 1's throughput line
	// (0.5 s before its failure), the second whole; the backoff not.
	if a := rep.Attempts; len(a) == 2 {
		if a[0].LastProgress == nil || !a[0].LastProgress.After(a[0].Start) || !a[0].LastProgress.Before(a[0].End) || a[1].LastProgress != nil {
			t.Errorf("last_progress of the attempts: %v and %v, want one inside the first, none in the second", a[0].LastProgress, a[1].LastProgress)
		}
		if rep.Goodput == nil || *rep.Goodput <= 0 || *rep.Goodput >= 1 {
			t.Errorf("goodput %v, want between 0 and 1", rep.Goodput)
		}
	}
	if !strings.Contains(out+errOut, "goodput: ") || !strings.Contains(out+errOut, "over 2 attempts") {
		t.Errorf("the summary gives no goodput:\n%s\n%s", out, errOut)
	}

	t.Run("NoRestarts", func(t *testing.T) {
		t.Parallel()
		l := startLauncher(t, false, "-np", "2", "sh", "-c", restartScript)
		assertCode(t, l, 3)
		if strings.Contains(l.stderr(), "restarting") {
			t.Errorf("restarted without --max-restarts:\n%s", l.stderr())
		}
	})
	t.Run("TimeoutNeverRestarts", func(t *testing.T) {
		t.Parallel()
		l := startLauncher(t, false, "-np", "2", "--max-restarts", "3", "--timeout", "1", "sleep", "30")
		assertCode(t, l, 124)
		if strings.Contains(l.stderr(), "restarting") {
			t.Errorf("restarted after --timeout:\n%s", l.stderr())
		}
	})
}
