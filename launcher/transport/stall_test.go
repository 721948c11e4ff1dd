package transport

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// TestStallGuard: a write nobody reads ends with errStalled once it made
// no progress for the guard's time, and so do the session's reads; a
// slow reader that keeps taking chunks is never cut off, however long
// the whole write takes.
func TestStallGuard(t *testing.T) {
	t.Run("NobodyReads", func(t *testing.T) {
		ours, theirs := net.Pipe()
		defer theirs.Close()
		g := newStallGuard(ours, 100*time.Millisecond)
		if _, err := g.Write(make([]byte, 10)); !errors.Is(err, errStalled) {
			t.Errorf("write: %v, want errStalled", err)
		}
		if _, err := g.Read(make([]byte, 1)); !errors.Is(err, errStalled) {
			t.Errorf("read after the stall: %v, want errStalled", err)
		}
	})
	t.Run("SlowReader", func(t *testing.T) {
		ours, theirs := net.Pipe()
		defer theirs.Close()
		const after = time.Second
		done := make(chan error, 1)
		go func() { // a chunk every 300 ms: the whole write takes longer than after
			buf := make([]byte, stallChunk)
			for {
				if _, err := io.ReadFull(theirs, buf); err != nil {
					done <- err
					return
				}
				time.Sleep(300 * time.Millisecond)
			}
		}()
		g := newStallGuard(ours, after)
		start := time.Now()
		if n, err := g.Write(make([]byte, 5*stallChunk)); err != nil || n != 5*stallChunk {
			t.Fatalf("write: %d bytes, %v", n, err)
		}
		t.Logf("5 chunks took %v with a %v guard", time.Since(start).Round(time.Millisecond), after)
		ours.Close()
		if err := <-done; err != io.EOF && !errors.Is(err, io.ErrClosedPipe) {
			t.Errorf("reader: %v", err)
		}
	})
}

// boundedPipe is a stream that knows its host's keepalive bound.
type boundedPipe struct {
	io.ReadWriteCloser
	bound time.Duration
}

func (b boundedPipe) stallBound() time.Duration { return b.bound }

// TestGuardBound: a session's stall bound is StallTimeout, or, when
// longer, its stream's bound: for an SSH session, the keepalives' bound
// (ServerAliveInterval x ServerAliveCountMax) and two intervals, past the
// most the keepalives take to find the host silent.
func TestGuardBound(t *testing.T) {
	a, _ := net.Pipe()
	defer a.Close()
	for _, tc := range []struct {
		rwc  io.ReadWriteCloser
		want time.Duration
	}{
		{a, StallTimeout},
		{boundedPipe{a, time.Second}, StallTimeout},
		{boundedPipe{a, 90 * time.Second}, 90 * time.Second},
		{&chanConn{silence: 45 * time.Second, interval: 15 * time.Second}, 75 * time.Second},
		{&chanConn{silence: 15 * time.Second, interval: 5 * time.Second}, 25 * time.Second},
	} {
		if got := Guard(tc.rwc).(*stallGuard).after; got != tc.want {
			t.Errorf("Guard(%T with bound) after %v, want %v", tc.rwc, got, tc.want)
		}
	}
}
