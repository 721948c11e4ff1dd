// Package osproc is what the kernel tells about a process and the one way
// gangway stops a process group: the /proc/PID/stat line (ParseStat,
// ReadStat), a wait status as the exit code bash reports (ExitCode), and
// the signals to a whole process group, SIGTERM then SIGKILL after a grace
// (SignalGroup, KillGroup, Shutdown, StopGroup).
//
// It is a leaf: it imports no gangway package, and it does not log.
package osproc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Stat is the part of /proc/PID/stat that gangway reads (proc(5)). Times
// are in clock ticks (USER_HZ, 100 a second on Linux).
type Stat struct {
	Pid int
	// Comm is the command name as the kernel keeps it (at most 15 bytes
	// of the executable's name or what prctl set): it may hold spaces,
	// parentheses and newlines.
	Comm string
	// State is the state letter: 'R' running, 'S' sleeping, 'D' in
	// uninterruptible sleep, 'Z' zombie, 'T' stopped, 'X' dead, ...
	State byte
	PPid  int // the parent's pid
	Pgrp  int // the process group id
	// UTime and STime are the process's own user and system CPU time;
	// CUTime and CSTime those of its children that it has waited for.
	UTime, STime   uint64
	CUTime, CSTime int64
	// Start is when the process started, in clock ticks after boot: a
	// pid is reused once its process is reaped, and (pid, Start) names
	// one process for as long as the machine runs.
	Start uint64
}

// String describes the process for messages: "pid 12 (sleep) state S
// ppid 1".
func (s Stat) String() string {
	return fmt.Sprintf("pid %d (%s) state %c ppid %d", s.Pid, s.Comm, s.State, s.PPid)
}

// Live reports whether the process was running when read: not a zombie
// (ended, not yet reaped: kill(pid, 0) still succeeds on it) and not dead.
func (s Stat) Live() bool { return s.State != 'Z' && s.State != 'X' }

// statFields is how many fields after the command name ParseStat needs:
// from the state (field 3) to the start time (field 22).
const statFields = 20

// ParseStat parses the content of /proc/PID/stat: "PID (COMM) STATE PPID
// PGRP ...". The command name runs from the first '(' to the last ')',
// since it may hold any byte but NUL, ')' and spaces included; nothing
// after it can hold a ')'.
func ParseStat(b []byte) (Stat, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 2 || end < open || b[open-1] != ' ' {
		return Stat{}, malformed(b, "no \"PID (COMM)\"")
	}
	pid, err := strconv.Atoi(string(b[:open-1]))
	if err != nil || pid < 0 {
		return Stat{}, malformed(b, "bad pid")
	}
	f := bytes.Fields(b[end+1:]) // f[0] is field 3, the state
	if len(f) < statFields {
		return Stat{}, malformed(b, fmt.Sprintf("%d fields after the command name, want %d or more", len(f), statFields))
	}
	if len(f[0]) != 1 || !isLetter(f[0][0]) {
		return Stat{}, malformed(b, "bad state")
	}
	s := Stat{Pid: pid, Comm: string(b[open+1 : end]), State: f[0][0]}
	p := fieldParser{f: f}
	s.PPid = p.int(4)
	s.Pgrp = p.int(5)
	s.UTime, s.STime = p.uint(14), p.uint(15)
	s.CUTime, s.CSTime = p.int64(16), p.int64(17)
	s.Start = p.uint(22)
	if p.bad != 0 {
		return Stat{}, malformed(b, fmt.Sprintf("bad field %d", p.bad))
	}
	return s, nil
}

// ReadStat reads and parses /proc/PID/stat. A process that does not exist
// (any more) gives an error that wraps fs.ErrNotExist.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err // *fs.PathError: it names the file
	}
	s, err := ParseStat(b)
	if err != nil {
		return Stat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return s, nil
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// fieldParser parses numbered stat fields (proc(5)'s numbers, from 1)
// of f, which starts at field 3; bad is the first field that did not
// parse, 0 while all did.
type fieldParser struct {
	f   [][]byte
	bad int
}

func (p *fieldParser) note(n int, err error) {
	if err != nil && p.bad == 0 {
		p.bad = n
	}
}

func (p *fieldParser) int(n int) int {
	v, err := strconv.Atoi(string(p.f[n-3]))
	p.note(n, err)
	return v
}

func (p *fieldParser) int64(n int) int64 {
	v, err := strconv.ParseInt(string(p.f[n-3]), 10, 64)
	p.note(n, err)
	return v
}

func (p *fieldParser) uint(n int) uint64 {
	v, err := strconv.ParseUint(string(p.f[n-3]), 10, 64)
	p.note(n, err)
	return v
}

// malformed is the error for a stat line that does not parse, with the
// line's start.
func malformed(b []byte, why string) error {
	const show = 80
	if len(b) > show {
		b = b[:show]
	}
	return fmt.Errorf("malformed stat line %q: %s", b, why)
}
