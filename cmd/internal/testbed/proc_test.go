package testbed_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
	"github.com/gangway-hpc/gangway/internal/osproc"
)

// pgroup lists the PIDs whose process group is pgid, from /proc.
func pgroup(t *testing.T, pgid int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, err := osproc.ReadStat(pid); err == nil && s.Pgrp == pgid {
			pids = append(pids, pid)
		}
	}
	return pids
}

func gone(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid) + "/stat")
	return errors.Is(err, os.ErrNotExist)
}

func TestCloseStopsProcesses(t *testing.T) {
	t.Parallel()
	b := newBed(t, testbed.Options{Prefix: "gwt4", Hosts: 2, Subnet: 204})
	sleeper, err := b.Start(t.Context(), 0, "sleep", "1000")
	if err != nil {
		t.Fatal(err)
	}
	shell, err := b.Start(t.Context(), 1, "sh", "-c", "sleep 1000 & sleep 1000")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	waitFor(t, 10*time.Second, "sh and its background sleep", func() bool {
		pids = pgroup(t, shell.Pid)
		return len(pids) >= 2
	})
	pids = append(pids, sleeper.Pid)
	t.Logf("pids %v", pids)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if !gone(pid) {
			st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			t.Errorf("pid %d left after Close: %s", pid, st)
		}
	}
	if _, err := b.Start(t.Context(), 0, "true"); err == nil {
		t.Error("Start after Close succeeded")
	}
}

// TestStopEscalates: a process group that ignores SIGTERM is SIGKILLed
// after the grace period, grandchild included.
func TestStopEscalates(t *testing.T) {
	t.Parallel()
	b := newBed(t, testbed.Options{Prefix: "gwt5", Hosts: 1, Subnet: 205})
	p, err := b.Start(t.Context(), 0, "sh", "-c", `trap "" TERM; sleep 1000 & sleep 1000; echo survived`)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	waitFor(t, 10*time.Second, "sh and its background sleep", func() bool {
		pids = pgroup(t, p.Pid)
		return len(pids) >= 2
	})
	const grace = 300 * time.Millisecond
	start := time.Now()
	if err := p.Stop(grace); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < grace {
		t.Errorf("Stop returned after %v, before the %v grace", d, grace)
	}
	var ee *exec.ExitError
	if err := p.Wait(); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("Wait = %v, want killed by SIGKILL; output %q", err, p.Output())
	}
	for _, pid := range pids {
		if !gone(pid) {
			t.Errorf("pid %d left after Stop", pid)
		}
	}
}

// TestCommandCancel: cancelling Command's ctx kills its whole group.
func TestCommandCancel(t *testing.T) {
	t.Parallel()
	b := newBed(t, testbed.Options{Prefix: "gwt7", Hosts: 1, Subnet: 207})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cmd := b.Command(ctx, 0, "sh", "-c", "sleep 1000 & echo $!; wait")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := cmd.Wait(); err == nil {
		t.Error("Wait after cancel returned nil")
	}
	// The orphaned sleep is reaped by init, which can take a moment.
	waitFor(t, 10*time.Second, "background sleep "+line+" to be gone", func() bool { return gone(child) })
}

// TestCloseKillsUntracked: Close kills processes left in the bed's
// namespaces that it did not start itself (here a Command never waited
// for; in practice OpenSSH sessions), so the namespaces really go away.
func TestCloseKillsUntracked(t *testing.T) {
	t.Parallel()
	b := newBed(t, testbed.Options{Prefix: "gwt8", Hosts: 1, Subnet: 208})
	cmd := b.Command(t.Context(), 0, "sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("untracked sleep: Wait = %v, want killed by SIGKILL", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("untracked sleep still running 10s after Close")
	}
}
