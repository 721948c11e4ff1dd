package osproc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Lines as Linux 6.x wrote them (the fuzz corpus in testdata holds them
// too).
const (
	statKthread = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 26 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
	statParen   = "6040 (sl) ee (p) S 1 6034 31109 0 -1 4194304 129 0 0 0 0 0 0 0 20 0 1 0 690962 2990080 445 18446744073709551615 94407361818624 94407361836553 140733234617584 0 0 0 0 6 0 1 0 0 17 0 0 0 0 0 0 94407361850640 94407361851904 94408410669056 140733234621117 140733234621132 140733234621132 140733234622444 0\n"
	statNewline = "6164 (x) y\n(z) 9 9) R 6162 6162 31109 0 -1 4194304 921 0 0 0 1 0 0 0 20 0 1 0 691174 14532608 2210 18446744073709551615 4321280 7138889 140731072996448 0 0 0 0 16781312 2 0 0 0 17 0 0 0 0 0 0 9702856 11005272 1018294272 140731072997879 140731072998082 140731072998082 140731072999399 0\n"
	statZombie  = "6043 (sleep) Z 6041 6034 31109 0 -1 4227084 96 0 0 0 0 0 0 0 20 0 1 0 690962 0 0 18446744073709551615 0 0 0 0 0 0 0 6 0 1 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
	statTimes   = "77 (python3) R 1 77 77 0 -1 4194304 0 0 0 0 1234 56 7 -8 20 0 9 0 4242\n"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Stat
	}{
		{statKthread, Stat{Pid: 2, Comm: "kthreadd", State: 'S', Start: 26}},
		{statParen, Stat{Pid: 6040, Comm: "sl) ee (p", State: 'S', PPid: 1, Pgrp: 6034, Start: 690962}},
		{statNewline, Stat{Pid: 6164, Comm: "x) y\n(z) 9 9", State: 'R', PPid: 6162, Pgrp: 6162, UTime: 1, Start: 691174}},
		{statZombie, Stat{Pid: 6043, Comm: "sleep", State: 'Z', PPid: 6041, Pgrp: 6034, Start: 690962}},
		// Exactly the fields up to the start time, without a newline.
		{strings.TrimSuffix(statTimes, "\n"), Stat{Pid: 77, Comm: "python3", State: 'R', PPid: 1, Pgrp: 77, UTime: 1234, STime: 56, CUTime: 7, CSTime: -8, Start: 4242}},
		{"1 () S 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0", Stat{Pid: 1, State: 'S', Pgrp: 1, Start: 5}},
	} {
		got, err := ParseStat([]byte(tc.line))
		if err != nil || got != tc.want {
			t.Errorf("ParseStat(%q) =\n\t%+v, %v\nwant\n\t%+v", tc.line, got, err, tc.want)
		}
	}
}

func TestParseStatRefuses(t *testing.T) {
	for _, tc := range []struct{ line, why string }{
		{"", `no "PID (COMM)"`},
		{"12 sleep S 1 1", `no "PID (COMM)"`},
		{"(sleep) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0", `no "PID (COMM)"`},
		{"12(sleep) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0", `no "PID (COMM)"`},
		{"12 (sleep S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0", `no "PID (COMM)"`},
		{"x2 (sleep) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0", "bad pid"},
		{"-2 (sleep) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0", "bad pid"},
		{"12 (sleep) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0", "19 fields after the command name, want 20 or more"},
		{"12 (sleep) SS 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0", "bad state"},
		{"12 (sleep) \x88 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0", "bad state"},
		{"12 (sleep) S x 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0", "bad field 4"},
		{"12 (sleep) S 1 1 1 0 -1 0 0 0 0 0 -3 0 0 0 20 0 1 0 5 0", "bad field 14"},
		{"12 (sleep) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 -5 0", "bad field 22"},
	} {
		_, err := ParseStat([]byte(tc.line))
		if err == nil || !strings.HasSuffix(err.Error(), ": "+tc.why) {
			t.Errorf("ParseStat(%q): %v, want an error ending %q", tc.line, err, tc.why)
		}
	}
}

// TestReadStat reads a child whose command name is made to mislead: a
// ')' and spaces, with what looks like a state after them.
func TestReadStat(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "a) Z 1 (b")
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep program")
	}
	data, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "3600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	s, err := ReadStat(cmd.Process.Pid)
	for err == nil && s.Comm != "a) Z 1 (b" { // the name changes at exec
		s, err = ReadStat(cmd.Process.Pid)
	}
	if err != nil {
		t.Fatal(err)
	}
	if s.Pid != cmd.Process.Pid || s.PPid != os.Getpid() || !s.Live() || s.Start == 0 {
		t.Errorf("ReadStat of the child = %+v; want pid %d, ppid %d, live, a start time", s, cmd.Process.Pid, os.Getpid())
	}
	self, err := ReadStat(os.Getpid())
	if err != nil || self.Start > s.Start {
		t.Errorf("ReadStat of the test = %+v, %v; want a start no later than its child's %d", self, err, s.Start)
	}
}

func TestReadStatOfNoProcess(t *testing.T) {
	// pid_max is at most 2^22: this pid never exists.
	if _, err := ReadStat(1 << 23); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadStat of no process: %v, want fs.ErrNotExist", err)
	}
}

// FuzzParseStat: any bytes parse or fail without a panic; what parses is
// written back the kernel's way and parses the same; and any bytes with
// no NUL, used as a command name, come back whole.
func FuzzParseStat(f *testing.F) {
	for _, l := range []string{statKthread, statParen, statNewline, statZombie, statTimes, "1 ()) S 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0"} {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseStat(b)
		if err == nil {
			again, err := ParseStat([]byte(format(s)))
			if err != nil || again != s {
				t.Fatalf("ParseStat(%q) = %+v, which written back parses as %+v, %v", b, s, again, err)
			}
		}
		if strings.IndexByte(string(b), 0) >= 0 {
			return
		}
		want := Stat{Pid: 42, Comm: string(b), State: 'S', PPid: 1, Pgrp: 42, UTime: 3, STime: 4, CUTime: 5, CSTime: 6, Start: 77}
		got, err := ParseStat([]byte(format(want)))
		if err != nil || got != want {
			t.Fatalf("command name %q: parsed as %+v, %v", b, got, err)
		}
	})
}

// format writes s as the kernel writes /proc/PID/stat, with zeros for the
// fields Stat does not keep.
func format(s Stat) string {
	return fmt.Sprintf("%d (%s) %s %d %d 0 0 -1 0 0 0 0 0 %d %d %d %d 20 0 1 0 %d 0 0 18446744073709551615\n",
		s.Pid, s.Comm, []byte{s.State}, s.PPid, s.Pgrp, s.UTime, s.STime, s.CUTime, s.CSTime, s.Start)
}
