package facts

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestNvidiaSMIBounded: an nvidia-smi that hangs (a driver in a bad
// state) is given up within its bound, so the facts still answer.
func TestNvidiaSMIBounded(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte("#!/bin/sh\nexec /bin/sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	old := nvidiaSMITimeout
	nvidiaSMITimeout = 200 * time.Millisecond
	defer func() { nvidiaSMITimeout = old }()
	t0 := time.Now()
	_, err := runNvidiaSMI(context.Background(), gpuQuery...)
	if took := time.Since(t0); err == nil || took > 10*time.Second {
		t.Fatalf("runNvidiaSMI: %v after %v, want an error well before the hung command's 60 s", err, took)
	}
}
