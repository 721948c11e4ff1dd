// Package fdio writes to a descriptor under a deadline that counts only
// the time the descriptor is full: what it takes at once is written with
// no deadline. A deadline set before a write also counts the writer's
// own wait for a CPU before it writes, and Go's writes find a passed
// deadline before they try the descriptor: on a host whose cores are
// all busy (thousands of ranks starting), a one-line write to a reader
// that reads everything failed as a timeout.
package fdio

import (
	"io"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// TryWrite writes to rc what it takes now, without waiting: the bytes
// written and the first error other than EAGAIN.
func TryWrite(rc syscall.RawConn, b []byte) (int, error) {
	n := 0
	var werr error
	err := rc.Write(func(fd uintptr) bool {
		for n < len(b) {
			m, err := unix.Write(int(fd), b[n:])
			if m > 0 {
				n += m
			}
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				return true
			case err != nil:
				werr = err
				return true
			case m <= 0:
				return true
			}
		}
		return true
	})
	if err == nil {
		err = werr
	}
	return n, err
}

// DeadlineWriter is a writer with write deadlines (a net.Conn, or an
// *os.File of a pollable descriptor).
type DeadlineWriter interface {
	io.Writer
	SetWriteDeadline(time.Time) error
}

// RawConn is w's descriptor for TryWrite and WriteWithin, or nil when w
// has none (a syscall.Conn that says so, or no syscall.Conn). Found once
// by the caller: SyscallConn makes a new value on every call.
func RawConn(w any) syscall.RawConn {
	sc, ok := w.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// WriteWithin writes all of b to w: what w's descriptor rc (RawConn(w);
// nil: none) takes at once first, then the rest under a deadline of d
// from then, cleared after. A reader that takes nothing for d fails the
// write with an error that wraps os.ErrDeadlineExceeded.
func WriteWithin(w DeadlineWriter, rc syscall.RawConn, b []byte, d time.Duration) error {
	n := 0
	if rc != nil {
		var err error
		if n, err = TryWrite(rc, b); err != nil {
			return err
		}
	}
	if n == len(b) {
		return nil
	}
	_ = w.SetWriteDeadline(time.Now().Add(d))
	_, err := w.Write(b[n:])
	_ = w.SetWriteDeadline(time.Time{})
	return err
}
