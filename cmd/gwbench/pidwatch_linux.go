package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// taggedPids lists the processes whose environment holds kv (KEY=VALUE)
// exactly, from /proc. A zombie has no environment left and is not
// listed: it has exited.
func taggedPids(kv string) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	self := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue // gone meanwhile
		}
		if environHas(env, kv) {
			out = append(out, pid)
		}
	}
	return out, nil
}

// killPids sends SIGKILL to each pid; one already gone is no error.
func killPids(pids []int) error {
	var errs []error
	for _, pid := range pids {
		if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("kill %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}

// exitWatch follows processes through pidfds, which become readable when
// the process exits: no polling of /proc, and the moment is the exit's
// own, not the next sample's.
type exitWatch struct {
	pids []int
	fds  []int
}

// watchExits opens a pidfd on each pid. A pid already gone is left out.
func watchExits(pids []int) (*exitWatch, error) {
	w := &exitWatch{}
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil {
			w.close()
			return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
		}
		w.pids = append(w.pids, pid)
		w.fds = append(w.fds, fd)
	}
	return w, nil
}

// wait returns, in the order of w.pids, when each process was seen to
// exit: once all have, or at deadline, or when ctx ends. The zero time
// means still running.
func (w *exitWatch) wait(ctx context.Context, deadline time.Time) ([]time.Time, error) {
	gone := make([]time.Time, len(w.pids))
	pfds := make([]unix.PollFd, len(w.fds))
	idx := make([]int, len(w.fds)) // pfds[i] watches w.pids[idx[i]]
	for i, fd := range w.fds {
		pfds[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		idx[i] = i
	}
	for len(pfds) > 0 && ctx.Err() == nil {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		// Wake at least every 50 ms to notice ctx; an exit wakes it at once.
		n, err := unix.Poll(pfds, int(min(left, 50*time.Millisecond)/time.Millisecond)+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return gone, fmt.Errorf("poll pidfds: %w", err)
		}
		if n == 0 {
			continue
		}
		now := time.Now()
		keep, keepIdx := pfds[:0], idx[:0]
		for i, p := range pfds {
			if p.Revents != 0 {
				gone[idx[i]] = now
				continue
			}
			keep, keepIdx = append(keep, p), append(keepIdx, idx[i])
		}
		pfds, idx = keep, keepIdx
	}
	return gone, nil
}

func (w *exitWatch) close() {
	for _, fd := range w.fds {
		unix.Close(fd)
	}
	w.fds = nil
}
