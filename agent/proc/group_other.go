//go:build !linux

package proc

import (
	"errors"
	"syscall"
)

// scanGroups has no /proc to read: each group is its leader alone.
func scanGroups(want map[int]bool) []groupEntry {
	out := make([]groupEntry, 0, len(want))
	for g := range want {
		out = append(out, groupEntry{g, Member{Pid: g}})
	}
	return out
}

// ErrNotCurrent says a member is no longer the process its snapshot saw.
var ErrNotCurrent = errors.New("no longer the process listed")

// Current cannot tell a reused pid apart without /proc: it checks that
// the pid exists.
func (m Member) Current(pgid int) bool { return syscall.Kill(m.Pid, 0) == nil }

// Signal sends sig to m by pid.
func (m Member) Signal(pgid int, sig syscall.Signal) error {
	return syscall.Kill(m.Pid, sig)
}

// WaitExited returns at once off Linux: the caller's Wait follows.
func WaitExited(pid int) error { return nil }
