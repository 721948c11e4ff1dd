package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"
)

// heldWriter records each Write; while hold is set, a Write blocks until
// a value is sent on release, and says it started on started.
type heldWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	writes  []int
	hold    bool
	started chan struct{}
	release chan error
}

func (w *heldWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	hold := w.hold
	w.mu.Unlock()
	if hold {
		w.started <- struct{}{}
		if err := <-w.release; err != nil {
			return 0, err
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, len(p))
	w.buf.Write(p)
	return len(p), nil
}

// waitGathered waits until n frames of size bytes each are gathered
// behind the Write under way.
func waitGathered(t *testing.T, c *Conn, bytes int) {
	t.Helper()
	for range 2000 {
		c.g.mu.Lock()
		got := 0
		if c.g.pend != nil {
			got = len(*c.g.pend)
		}
		c.g.mu.Unlock()
		if got == bytes {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%d bytes never gathered", bytes)
}

// TestGatherOneWrite: frames sent while a Write is under way go out
// together in the next Write, each whole and in the order sent, and
// every sender returns once its frame is written.
func TestGatherOneWrite(t *testing.T) {
	w := &heldWriter{hold: true, started: make(chan struct{}), release: make(chan error)}
	c := NewConn(pipeConn{Reader: bytes.NewReader(nil), w: w})
	errs := make(chan error, 9)
	go func() { errs <- c.Send(KindPing, nil) }()
	<-w.started // the first frame's Write is under way
	const senders = 8
	for i := range senders {
		go func() { errs <- c.SendOutput(i, Stdout, []byte(fmt.Sprintf("line %d\n", i))) }()
		waitGathered(t, c, (i+1)*(5+outputHeader+7)) // one at a time: a known order
	}
	w.release <- nil // the ping's Write ends; one sender leads the rest
	<-w.started
	w.release <- nil
	for range senders + 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if len(w.writes) != 2 {
		t.Fatalf("%d Writes %v, want 2 (the ping, then the eight lines together)", len(w.writes), w.writes)
	}
	r := NewConn(pipeConn{Reader: &w.buf, w: io.Discard})
	if m, err := r.Recv(); err != nil || m.Kind != KindPing {
		t.Fatalf("first frame %v %v, want ping", m.Kind, err)
	}
	for i := range senders {
		m, err := r.Recv()
		if err != nil {
			t.Fatal(err)
		}
		rank, _, data, err := m.Output()
		if want := fmt.Sprintf("line %d\n", i); err != nil || rank != i || string(data) != want {
			t.Fatalf("frame %d: rank %d %q %v, want rank %d %q", i+1, rank, data, err, i, want)
		}
	}
}

// TestGatherFailure: a failed Write fails the senders of its frames and
// every frame sent after it (the stream is broken mid-frame); frames
// written before it were sent.
func TestGatherFailure(t *testing.T) {
	w := &heldWriter{hold: true, started: make(chan struct{}), release: make(chan error)}
	c := NewConn(pipeConn{Reader: bytes.NewReader(nil), w: w})
	first := make(chan error, 1)
	go func() { first <- c.Send(KindPing, nil) }()
	<-w.started
	w.release <- nil
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	broken := errors.New("broken pipe")
	second := make(chan error, 1)
	go func() { second <- c.Send(KindPing, nil) }()
	<-w.started
	third := make(chan error, 1)
	go func() { third <- c.Send(KindExit, Exit{Rank: 1}) }()
	exit, _ := Encode(KindExit, Exit{Rank: 1})
	waitGathered(t, c, 5+len(exit.Payload())) // gathered behind the Write that will fail
	w.release <- broken
	for name, ch := range map[string]chan error{"its own": second, "gathered behind it": third} {
		if err := <-ch; !errors.Is(err, broken) {
			t.Errorf("frame %s: %v, want the Write's error", name, err)
		}
	}
	if err := c.Send(KindPing, nil); !errors.Is(err, broken) {
		t.Errorf("frame after the failure: %v, want the Write's error", err)
	}
	if err := c.SendOutput(0, Stdout, make([]byte, pooledMax)); !errors.Is(err, broken) {
		t.Errorf("large frame after the failure: %v, want the Write's error", err)
	}
	if len(w.writes) != 1 {
		t.Errorf("%d Writes recorded, want 1 (the first ping)", len(w.writes))
	}
}

// TestGatherLargeAfterGathered: a frame too large to gather is written
// in pieces, after the frames gathered before it and before any sent
// after it.
func TestGatherLargeAfterGathered(t *testing.T) {
	w := &heldWriter{hold: true, started: make(chan struct{}), release: make(chan error)}
	c := NewConn(pipeConn{Reader: bytes.NewReader(nil), w: w})
	errs := make(chan error, 3)
	go func() { errs <- c.SendOutput(0, Stdout, []byte("first\n")) }()
	<-w.started
	go func() { errs <- c.SendOutput(1, Stdout, []byte("gathered\n")) }()
	waitGathered(t, c, 5+outputHeader+9)
	big := bytes.Repeat([]byte("x"), pooledMax)
	go func() { errs <- c.SendOutput(2, Stdout, big) }()
	w.mu.Lock()
	w.hold = false
	w.mu.Unlock()
	w.release <- nil
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := c.SendOutput(3, Stdout, []byte("last\n")); err != nil {
		t.Fatal(err)
	}
	r := NewConn(pipeConn{Reader: &w.buf, w: io.Discard})
	for i, want := range [][]byte{[]byte("first\n"), []byte("gathered\n"), big, []byte("last\n")} {
		m, err := r.Recv()
		if err != nil {
			t.Fatal(err)
		}
		rank, _, data, err := m.Output()
		if err != nil || rank != i || !bytes.Equal(data, want) {
			t.Fatalf("frame %d: rank %d, %d bytes, %v; want rank %d, %d bytes", i, rank, len(data), err, i, len(want))
		}
	}
}

// TestGatherConcurrent: many senders at once; every frame arrives whole
// and each sender's frames in the order it sent them.
func TestGatherConcurrent(t *testing.T) {
	var w heldWriter
	c := NewConn(pipeConn{Reader: bytes.NewReader(nil), w: &w})
	const senders, each = 16, 200
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				if err := c.SendOutput(s, Stdout, []byte(fmt.Sprintf("%d %d\n", s, i))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	r := NewConn(pipeConn{Reader: &w.buf, w: io.Discard})
	next := make([]int, senders)
	for range senders * each {
		m, err := r.Recv()
		if err != nil {
			t.Fatal(err)
		}
		rank, _, data, err := m.Output()
		if err != nil || rank < 0 || rank >= senders {
			t.Fatalf("frame: rank %d %v", rank, err)
		}
		if want := fmt.Sprintf("%d %d\n", rank, next[rank]); string(data) != want {
			t.Fatalf("sender %d: %q, want %q", rank, data, want)
		}
		next[rank]++
	}
	if _, err := r.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("after every frame: %v, want EOF", err)
	}
	t.Logf("%d frames in %d Writes", senders*each, len(w.writes))
}

// readOutputs reads frames from b and checks they are output frames of
// ranks 0.. with the data want.
func readOutputs(t *testing.T, b *bytes.Buffer, want [][]byte) {
	t.Helper()
	r := NewConn(pipeConn{Reader: b, w: io.Discard})
	for i, d := range want {
		m, err := r.Recv()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		rank, _, data, err := m.Output()
		if err != nil || rank != i || !bytes.Equal(data, d) {
			t.Fatalf("frame %d: rank %d, %d bytes, %v; want rank %d, %d bytes", i, rank, len(data), err, i, len(d))
		}
	}
	if m, err := r.Recv(); err == nil {
		t.Fatalf("a frame more: %s", m.Kind)
	}
}

// TestHold: frames sent while held are written at the last Release, in
// one Write and in the order sent; their senders return at once.
func TestHold(t *testing.T) {
	var w heldWriter
	c := NewConn(pipeConn{Reader: bytes.NewReader(nil), w: &w})
	c.Hold()
	c.Hold() // nested: the inner Release writes nothing
	var want [][]byte
	for i := range 32 {
		d := []byte(fmt.Sprintf("start of host %d\n", i))
		want = append(want, d)
		if err := c.SendOutput(i, Stdout, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Release(); err != nil || len(w.writes) != 0 {
		t.Fatalf("inner Release: %v, %d Writes; want none", err, len(w.writes))
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	if len(w.writes) != 1 {
		t.Fatalf("%d Writes %v, want the 32 frames in one", len(w.writes), w.writes)
	}
	if err := c.SendOutput(32, Stdout, []byte("after\n")); err != nil || len(w.writes) != 2 {
		t.Fatalf("a frame after the Release: %v, %d Writes; want it written at once", err, len(w.writes))
	}
	readOutputs(t, &w.buf, append(want, []byte("after\n")))
	w.buf.Reset()
	if err := c.Release(); err != nil { // nothing held: nothing to write
		t.Fatal(err)
	}
	// That Release had no Hold: the next Hold still holds.
	c.Hold()
	if err := c.SendOutput(33, Stdout, []byte("held again\n")); err != nil || len(w.writes) != 2 {
		t.Fatalf("a frame held after an unmatched Release: %v, %d Writes; want it held", err, len(w.writes))
	}
	if err := c.Release(); err != nil || len(w.writes) != 3 {
		t.Fatalf("its Release: %v, %d Writes; want it written", err, len(w.writes))
	}
}

// TestHoldBounded: a held burst is written in batches of about holdMax,
// and a frame too large to gather writes the held frames before itself.
func TestHoldBounded(t *testing.T) {
	var w heldWriter
	c := NewConn(pipeConn{Reader: bytes.NewReader(nil), w: &w})
	c.Hold()
	var want [][]byte
	d := bytes.Repeat([]byte("x"), 16<<10)
	for i := range 3 * holdMax / len(d) {
		want = append(want, d)
		if err := c.SendOutput(i, Stdout, d); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(w.writes); n < 2 || n > 3 {
		t.Fatalf("%d Writes %v while held, want 2 or 3 of at most %d bytes", n, w.writes, holdMax+len(d)+64)
	}
	for _, n := range w.writes {
		if n > holdMax+len(d)+64 {
			t.Fatalf("a Write of %d bytes, over the bound", n)
		}
	}
	small := []byte("held\n")
	want = append(want, small)
	if err := c.SendOutput(len(want)-1, Stdout, small); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("y"), pooledMax)
	want = append(want, big)
	if err := c.SendOutput(len(want)-1, Stdout, big); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	readOutputs(t, &w.buf, want)
}

// TestHoldFailure: a held burst whose Write fails makes Release and
// every later send fail.
func TestHoldFailure(t *testing.T) {
	w := &heldWriter{hold: true, started: make(chan struct{}), release: make(chan error)}
	c := NewConn(pipeConn{Reader: bytes.NewReader(nil), w: w})
	c.Hold()
	for i := range 4 {
		if err := c.SendOutput(i, Stdout, []byte("x\n")); err != nil {
			t.Fatal(err)
		}
	}
	broken := errors.New("broken pipe")
	done := make(chan error, 1)
	go func() { done <- c.Release() }()
	<-w.started
	w.release <- broken
	if err := <-done; !errors.Is(err, broken) {
		t.Fatalf("Release: %v, want the Write's error", err)
	}
	c.Hold()
	if err := c.Send(KindPing, nil); !errors.Is(err, broken) {
		t.Errorf("a send after the failure, held: %v, want the Write's error", err)
	}
	if err := c.Release(); !errors.Is(err, broken) {
		t.Errorf("Release after the failure: %v", err)
	}
}
