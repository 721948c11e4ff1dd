package procscan

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		ok   bool
		comm string
		ppid int
	}{
		{"42 (sleep) S 7 42 42 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 12345 0 0", true, "sleep", 7},
		{"42 (a (b) c) R 1 42 42 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 99 0 0", true, "a (b) c", 1},
		{"42 (short) S 1", false, "", 0},
		{"no parens", false, "", 0},
		{"", false, "", 0},
	} {
		p, ok := parseStat(42, []byte(tc.in))
		if ok != tc.ok || ok && (p.Comm != tc.comm || p.PPid != tc.ppid) {
			t.Errorf("%q: %+v %v, want comm %q ppid %d ok %v", tc.in, p, ok, tc.comm, tc.ppid, tc.ok)
		}
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("42 (sleep) S 7 42 42 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 12345 0 0"))
	f.Add([]byte("1 ()) ) Z"))
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = parseStat(1, b) })
}

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
