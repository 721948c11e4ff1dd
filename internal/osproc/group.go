package osproc

import (
	"errors"
	"fmt"
	"syscall"
	"time"
)

// SignalGroup sends sig to every process of process group pgid: the one
// place gangway calls kill(-pgid). It refuses pgid <= 1, since kill(2)
// reads -1 as every process and 0 as the caller's own group. A group with
// no process left gives an error that wraps syscall.ESRCH.
func SignalGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		return fmt.Errorf("refusing to signal process group %d", pgid)
	}
	if err := syscall.Kill(-pgid, sig); err != nil {
		return fmt.Errorf("kill -%d -%d: %w", int(sig), pgid, err)
	}
	return nil
}

// KillGroup is SignalGroup where a group with no process left is not an
// error.
func KillGroup(pgid int, sig syscall.Signal) error {
	if err := SignalGroup(pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// Shutdown stops a process the one way gangway stops processes: it sends
// SIGTERM through signal, waits until exited is closed (the process has
// exited) or grace has passed, whichever is first, and then sends SIGKILL
// through signal. The SIGKILL goes out in both cases, so when signal
// reaches a process group, whatever the leader left in it (dataloader
// workers, a shell's background jobs) dies with it. A nil exited waits the
// whole grace; grace <= 0 sends SIGKILL alone.
//
// Shutdown blocks until SIGKILL has been sent. It returns the SIGTERM
// error at once, without waiting or sending SIGKILL, or the SIGKILL error.
// signal decides what is signalled and when not to: a signal function that
// does nothing once the process has been reaped keeps a reused PID safe.
func Shutdown(signal func(syscall.Signal) error, grace time.Duration, exited <-chan struct{}) error {
	if grace > 0 {
		if err := signal(syscall.SIGTERM); err != nil {
			return fmt.Errorf("SIGTERM: %w", err)
		}
		t := time.NewTimer(grace)
		select {
		case <-exited:
		case <-t.C:
		}
		t.Stop()
	}
	if err := signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("SIGKILL: %w", err)
	}
	return nil
}

// StopGroup is Shutdown for process group pgid: the signals go to the
// group (KillGroup), and a group with no process left is not an error.
func StopGroup(pgid int, grace time.Duration, exited <-chan struct{}) error {
	return Shutdown(func(sig syscall.Signal) error { return KillGroup(pgid, sig) }, grace, exited)
}
