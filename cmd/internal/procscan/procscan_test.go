package procscan

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestTaggedAndDescendants: a child started with a tag is found by it and
// below this process; killed and reaped, it is gone from both.
func TestTaggedAndDescendants(t *testing.T) {
	tag := "PROCSCAN_TEST=" + strings.Repeat("x", 8) + t.Name()
	cmd := exec.Command("sleep", "60")
	cmd.Env = append(os.Environ(), tag)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	found := Tagged(tag)
	if len(found) != 1 || found[0].Pid != cmd.Process.Pid || !Alive(found[0]) {
		t.Fatalf("Tagged: %v, want the child %d", found, cmd.Process.Pid)
	}
	below := false
	for _, p := range Descendants(os.Getpid()) {
		below = below || p.Pid == cmd.Process.Pid
	}
	if !below {
		t.Errorf("the child %d is not among this process's descendants", cmd.Process.Pid)
	}
	Kill(found)
	_ = cmd.Wait()
	if left := Tagged(tag); len(left) != 0 {
		t.Errorf("after Kill and Wait: %v", left)
	}
	if Alive(found[0]) {
		t.Error("Alive after the child was reaped")
	}
}
