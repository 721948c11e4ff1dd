package main

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// TestExitWatch: a tagged shell and its child are found through /proc,
// watched through pidfds and seen to exit once killed; nothing tagged is
// left for sweep.
func TestExitWatch(t *testing.T) {
	tag := fmt.Sprintf("%s=test-%d-%d", failVar, os.Getpid(), time.Now().UnixNano())
	cmd := exec.CommandContext(t.Context(), "/bin/sh", "-c", "sleep 30 & exec sleep 30")
	cmd.Env = append(os.Environ(), tag)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = sweep(tag) // the child, if the test ends early
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()

	var pids []int
	for range 3000 { // the shell forks its child: up to 30 s on a loaded machine
		var err error
		if pids, err = taggedPids(tag); err != nil {
			t.Fatal(err)
		}
		if len(pids) == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(pids) != 2 || !slices.Contains(pids, cmd.Process.Pid) {
		t.Fatalf("tagged processes %v, want the shell %d and its child", pids, cmd.Process.Pid)
	}
	w, err := watchExits(pids)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	if gone, err := w.wait(t.Context(), time.Now().Add(50*time.Millisecond)); err != nil || countSet(gone) != 0 {
		t.Fatalf("before any kill: exits %v, %v; want none", gone, err)
	}
	if err := killPids(pids); err != nil {
		t.Fatal(err)
	}
	gone, err := w.wait(t.Context(), time.Now().Add(10*time.Second))
	if err != nil || countSet(gone) != 2 {
		t.Fatalf("after SIGKILL: exits %v, %v; want both", gone, err)
	}
	// The child was reparented and reaped; the shell is a zombie until
	// Wait: neither has an environment in /proc any more.
	if left, err := sweep(tag); left != 0 || err != nil {
		t.Fatalf("sweep after the exits: %d left, %v", left, err)
	}
}
