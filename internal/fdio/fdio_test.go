package fdio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// socketpair is a connected pair of Unix stream sockets, both pollable.
func socketpair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cs [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return cs[0], cs[1]
}

// TestWriteWithin: a write the descriptor takes at once succeeds
// whatever the deadline (1 ns: shorter than any delay of the writer's
// before it writes), and leaves no deadline behind; a reader that takes
// nothing fails the write after d; a reader that drains a full socket
// within d lets it finish; a writer with no descriptor (net.Pipe) still
// gets the deadline.
func TestWriteWithin(t *testing.T) {
	w, r := socketpair(t)
	for range 3 {
		if err := WriteWithin(w, RawConn(w), []byte("cmd=response_to_init\n"), time.Nanosecond); err != nil {
			t.Fatalf("a write into an empty socket, 1 ns deadline: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := w.Write([]byte("x")); err != nil {
		t.Fatalf("a plain write after: %v (a deadline left behind?)", err)
	}
	got := make([]byte, 3*21+1)
	if _, err := io.ReadFull(r, got); err != nil || !bytes.HasSuffix(got, []byte("init\nx")) {
		t.Fatalf("read %q, %v", got, err)
	}

	// Nobody reads: the socket fills, and the rest waits d.
	big := make([]byte, 8<<20)
	start := time.Now()
	err := WriteWithin(w, RawConn(w), big, 200*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a write to a reader that takes nothing: %v, want a deadline error", err)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("gave up after %v, before the deadline", took)
	}

	// A fresh pair: the reader drains after a pause shorter than d.
	w, r = socketpair(t)
	done := make(chan error, 1)
	go func() {
		time.Sleep(50 * time.Millisecond)
		_, err := io.ReadFull(r, make([]byte, len(big)))
		done <- err
	}()
	if err := WriteWithin(w, RawConn(w), big, 10*time.Second); err != nil {
		t.Fatalf("a reader that drains in time: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// No descriptor: the deadline alone.
	pw, pr := net.Pipe()
	t.Cleanup(func() { pw.Close(); pr.Close() })
	if err := WriteWithin(pw, RawConn(pw), []byte("x"), 50*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("net.Pipe nobody reads: %v, want a deadline error", err)
	}
}
