package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

// runCombined runs the launcher with stdout and stderr on one file, as
// `launcher ... >log 2>&1` does, so the order of the two streams shows.
func runCombined(t *testing.T, args ...string) (out string, code int) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "out")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, self(t), args...)
	cmd.Env = append(os.Environ(), launcherEnv+"=1", "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	err = cmd.Run()
	f.Close()
	b, _ := os.ReadFile(path)
	if ctx.Err() != nil {
		t.Fatalf("launcher %v still running after %v:\n%s", args, deadline, e2e.Tail(string(b), 4000))
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return string(b), cmd.ProcessState.ExitCode()
}

// TestBenchSummaryAfterFailure: rank 1 prints its throughput and fails
// once ranks 0 and 2 have printed theirs (they then wait to be stopped).
// The summary still counts every rank, and comes after all rank output
// and after the failure report.
func TestBenchSummaryAfterFailure(t *testing.T) {
	t.Parallel()
	syncDir := t.TempDir()
	out, code := runCombined(t, "-l", "-np", "3", "--warmup-steps", "0", "--metric", rateMetric, "-x", "SYNC="+syncDir,
		"sh", "-c", `echo "rate $((10 + RANK))"; echo "rate $((20 + RANK))"
if [ "$RANK" = 1 ]; then
	while [ ! -e "$SYNC/0" ] || [ ! -e "$SYNC/2" ]; do sleep 0.05; done
	echo "rank 1 gives up" >&2; exit 3
fi
touch "$SYNC/$RANK"; exec sleep 30`)
	if code != 3 {
		t.Fatalf("exit code %d, want 3:\n%s", code, out)
	}
	t.Logf("launcher output (stdout and stderr together):\n%s", out)
	report := strings.Index(out, "launcher: job failed: rank 1 on localhost")
	last := strings.Index(out, "launcher: exit code 3\n")
	bench := strings.Index(out, "\nbench: 3 ranks on 1 host")
	if report < 0 || last < report || bench < 0 {
		t.Fatalf("want the failure report, then the summary")
	}
	if bench < last {
		t.Errorf("the summary comes before the end of the failure report")
	}
	sum := summaryAfterRanks(t, out)
	// Means 15, 16 and 17: the stopped ranks' lines are counted too.
	if want := "myips [no unit, per rank, measured on 3 of 3 ranks]\n  total         48.00 ± "; !strings.Contains(sum, want) {
		t.Errorf("summary lacks %q", want)
	}
	for _, line := range lines(sum) {
		if strings.HasPrefix(line, "launcher:") {
			t.Errorf("failure report line after the summary: %q", line)
		}
	}
}
