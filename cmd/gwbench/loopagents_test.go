package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/agent/sshd"
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

// TestLoopStartupLimits: beds above 1,024 agents give their agents a
// minute for the version line and two for the login, smaller ones the
// agent's defaults; a worker takes both bounds on its command line.
func TestLoopStartupLimits(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want sshd.StartupLimits
	}{
		{16, sshd.StartupLimits{}},
		{1024, sshd.StartupLimits{}},
		{1025, sshd.StartupLimits{VersionTimeout: time.Minute, LoginGraceTime: 2 * time.Minute}},
		{10000, sshd.StartupLimits{VersionTimeout: time.Minute, LoginGraceTime: 2 * time.Minute}},
	} {
		if got := loopStartupLimits(tc.n); got != tc.want {
			t.Errorf("%d agents: %+v, want %+v", tc.n, got, tc.want)
		}
	}
	dir := filepath.Join(t.TempDir(), "loop")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := sshtest.GenKeys(dir); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, lim := range []sshd.StartupLimits{{}, loopStartupLimits(10000)} {
		w, err := startLoopWorker(ctx, self, dir, 0, 1, "", lim)
		if err != nil {
			t.Fatalf("a worker with %+v: %v", lim, err)
		}
		w.stop()
	}
	var stderr strings.Builder
	if rc := loopWorkerMain(ctx, []string{"-dir", dir, "-n", "1", "-login-grace-time", "two minutes"}, strings.NewReader(""), io.Discard, &stderr); rc != 2 || !strings.Contains(stderr.String(), "login-grace-time") {
		t.Errorf("a bad login grace: rc %d, %q", rc, stderr.String())
	}
}
