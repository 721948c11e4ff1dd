//go:build linux

package proc

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gangway-hpc/gangway/internal/osproc"
)

// scanGroups reads every /proc/PID/stat once and keeps the processes
// whose process group is in want, each with the start time read from
// the same stat line as its group.
func scanGroups(want map[int]bool) []groupEntry {
	var out []groupEntry
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, err := osproc.ReadStat(pid); err == nil && want[s.Pgrp] {
			out = append(out, groupEntry{s.Pgrp, Member{pid, s.Start}})
		}
	}
	return out
}

// Current reports whether m is still the process the snapshot saw, in
// process group pgid.
func (m Member) Current(pgid int) bool {
	s, err := osproc.ReadStat(m.Pid)
	return err == nil && s.Pgrp == pgid && s.Start == m.Start
}

// ErrNotCurrent says a member is no longer the process its snapshot saw:
// it ended, left its group, or its pid now names another process.
var ErrNotCurrent = errors.New("no longer the process listed")

// Signal sends sig to m, if m is still the process the snapshot saw in
// group pgid, through a pidfd: opened first, then checked, so the signal
// cannot reach a later process given the same pid.
func (m Member) Signal(pgid int, sig syscall.Signal) error {
	fd, err := unix.PidfdOpen(m.Pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return ErrNotCurrent
		}
		return fmt.Errorf("pidfd_open %d: %w", m.Pid, err)
	}
	defer unix.Close(fd)
	// The pidfd names whichever process had the pid when it was opened;
	// that is m only if m still has it now.
	if !m.Current(pgid) {
		return ErrNotCurrent
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil {
		return fmt.Errorf("signal %d: %w", m.Pid, err)
	}
	return nil
}

// WaitExited waits until the child pid has exited, without reaping it:
// until its parent's Wait, its pid (and its process group's id) still
// names it, so whatever must not signal it after its exit can be told so
// first.
func WaitExited(pid int) error {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
