package main

import (
	"os/exec"
	"path/filepath"
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
	l := startLauncher(t, false, "-np", "2", "/usr/bin/python3", script)
	assertCode(t, l, 1)
	errOut := l.stderr()
	raised := strings.Index(errOut, "launcher:   rank 1 on localhost raised RuntimeError: loss is nan on rank 1 (from its TORCHELASTIC_ERROR_FILE)\n")
	frame := strings.Index(errOut, "launcher:   rank 1 traceback:     raise RuntimeError(f\"loss is nan on rank {rank}\")\n")
	inStep := strings.Index(errOut, "launcher:   rank 1 traceback:   File \"")
	tail := strings.Index(errOut, "launcher:   rank 1 stderr: ")
	if raised < 0 || frame < 0 || inStep < 0 || tail < 0 || !(raised < inStep && inStep < frame && frame < tail) {
		t.Errorf("the report does not show the exception, then its frames, then the stderr tail:\n%s", errOut)
	}
}
