package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/cmd/internal/testbed/roottest"
)

// TestMain lets the test binary stand in for gwbench's agent workers, as
// startLoopAgents starts its own executable with -loop-agents.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-loop-agents" {
		os.Exit(loopWorkerMain(context.Background(), os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestLoopWorkersHideGPUs: where the machine lists GPUs (a directory
// standing for /proc/driver/nvidia/gpus here), the loop agents' workers
// see it empty, so a scale run of eight ranks a host is not refused for
// the machine's one GPU; the machine itself still sees it.
func TestLoopWorkersHideGPUs(t *testing.T) {
	roottest.RequireRoot(t)
	gpus := t.TempDir()
	if err := os.Mkdir(filepath.Join(gpus, "0000:00:06.0"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := gpuProcDir
	gpuProcDir = gpus
	t.Cleanup(func() { gpuProcDir = old })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	la, err := startLoopAgents(ctx, 2, 8, filepath.Join(t.TempDir(), "loop"))
	if err != nil {
		t.Fatal(err)
	}
	defer la.stop()
	if la.hidden != gpus {
		t.Fatalf("hidden %q, want %q", la.hidden, gpus)
	}
	for _, pid := range la.pids() {
		// /proc/PID/root resolves paths in the worker's mount namespace.
		seen, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "root", gpus))
		if err != nil {
			t.Fatalf("worker %d: %v", pid, err)
		}
		if len(seen) != 0 {
			t.Errorf("worker %d sees %d entries in %s, want none", pid, len(seen), gpus)
		}
	}
	if seen, err := os.ReadDir(gpus); err != nil || len(seen) != 1 {
		t.Errorf("the machine sees %d entries in %s (%v), want its one GPU", len(seen), gpus, err)
	}
}
