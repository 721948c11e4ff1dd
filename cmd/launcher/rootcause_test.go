package main

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRootCauseFromRecord: rank 1 of a real torch job raises under torch's
// @record; the failure report shows the exception and the last frames of
// its traceback, with rank and host, before the stderr tail.
func TestRootCauseFromRecord(t *testing.T) {
	t.Parallel()
	if err := exec.Command("/usr/bin/python3", "-c", "import torch.distributed.elastic.multiprocessing.errors").Run(); err != nil {
		t.Skipf("Debian's python3 has no torch (install python3-torch): %v", err)
	}
	script, err := filepath.Abs("testdata/record.py")
	if err != nil {
		t.Fatal(err)
	}
	rj := filepath.Join(t.TempDir(), "report.json")
	l := startLauncher(t, false, "-np", "2", "--report", rj, "/usr/bin/python3", script)
	assertCode(t, l, 1)
	errOut := l.stderr()
	raised := strings.Index(errOut, "launcher:   rank 1 on localhost raised RuntimeError: loss is nan on rank 1 (from its TORCHELASTIC_ERROR_FILE)\n")
	frame := strings.Index(errOut, "launcher:   rank 1 traceback:     raise RuntimeError(f\"loss is nan on rank {rank}\")\n")
	inStep := strings.Index(errOut, "launcher:   rank 1 traceback:   File \"")
	tail := strings.Index(errOut, "launcher:   rank 1 stderr: ")
	if raised < 0 || frame < 0 || inStep < 0 || tail < 0 || !(raised < inStep && inStep < frame && frame < tail) {
		t.Errorf("the report does not show the exception, then its frames, then the stderr tail:\n%s", errOut)
	}
	// --report carries the same: the exception, its frames, the stderr tail.
	rep := readReport(t, rj)
	if len(rep.Failures) != 1 {
		t.Fatalf("failures = %+v, want rank 1's alone", rep.Failures)
	}
	f := rep.Failures[0]
	if f.Rank != 1 || f.Host != "localhost" || !f.Blamed || f.ExitCode != 1 || f.Signal != 0 || f.Pid == 0 {
		t.Errorf("failure = %+v, want rank 1 on localhost, blamed, exit code 1, no signal", f)
	}
	if f.RootCause == nil || f.RootCause.Exception != "RuntimeError: loss is nan on rank 1" || len(f.RootCause.Traceback) == 0 {
		t.Errorf("root cause = %+v, want the RuntimeError and its frames", f.RootCause)
	}
	if !strings.Contains(strings.Join(f.StderrTail, "\n"), "RuntimeError: loss is nan on rank 1") {
		t.Errorf("stderr tail %q lacks the exception", f.StderrTail)
	}
	if !strings.Contains(f.Cause, "rank 1 on localhost") {
		t.Errorf("cause %q does not name the rank and host", f.Cause)
	}
}

// TestReportHasFailures: --report carries the failure report for a rank
// killed by a signal, the signal (a torch rank's exception and stderr
// tail: TestRootCauseFromRecord).
func TestReportHasFailures(t *testing.T) {
	t.Parallel()
	t.Run("signal", func(t *testing.T) {
		t.Parallel()
		rj := filepath.Join(t.TempDir(), "report.json")
		l := startLauncher(t, false, "-np", "3", "--report", rj, "/bin/sh", "-c",
			`echo "rank $RANK going" >&2; if [ "$RANK" = 2 ]; then echo "rank 2 dies" >&2; kill -KILL $$; fi; sleep 30`)
		assertCode(t, l, 137)
		rep := readReport(t, rj)
		if len(rep.Failures) == 0 {
			t.Fatalf("no failures in the report; stderr:\n%s", l.stderr())
		}
		f := rep.Failures[0]
		if f.Rank != 2 || !f.Blamed || f.Signal != 9 || f.SignalName != "SIGKILL" || f.ExitCode != 137 || f.RootCause != nil {
			t.Errorf("failure = %+v, want rank 2 blamed, killed by SIGKILL, exit code 137, no root cause", f)
		}
		if want := []string{"rank 2 going", "rank 2 dies"}; !slices.Equal(f.StderrTail, want) {
			t.Errorf("stderr tail = %q, want %q", f.StderrTail, want)
		}
		for _, o := range rep.Failures[1:] {
			if o.Blamed {
				t.Errorf("%+v also blamed", o)
			}
		}
	})
}
