package pmi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// replyTimeout bounds every expected reply; the machine is shared and slow.
const replyTimeout = 20 * time.Second

// client is an in-test PMI client on one connection.
type client struct {
	t    *testing.T
	name string
	nc   net.Conn
	br   *bufio.Reader
}

// fdClient connects to rank's socketpair, as the rank would through PMI_FD.
func fdClient(t *testing.T, s *Server, rank int) *client {
	t.Helper()
	f, err := s.RankFD(rank)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &client{t: t, name: "r" + strconv.Itoa(rank), nc: nc, br: bufio.NewReader(nc)}
}

func (c *client) sendRaw(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("%s: write: %v", c.name, err)
	}
}

// send writes one PMI-1 line.
func (c *client) send(line string) { c.t.Helper(); c.sendRaw([]byte(line + "\n")) }

// line reads one PMI-1 line, without its '\n'.
func (c *client) line() string {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(replyTimeout))
	s, err := c.br.ReadString('\n')
	if err != nil {
		c.t.Fatalf("%s: read: %v (got %q)", c.name, err, s)
	}
	return strings.TrimSuffix(s, "\n")
}

// expect reads one PMI-1 line and compares it exactly.
func (c *client) expect(want string) {
	c.t.Helper()
	if got := c.line(); got != want {
		c.t.Fatalf("%s: got  %q\nwant %q", c.name, got, want)
	}
}

// call sends a PMI-1 request and expects the exact reply.
func (c *client) call(req, want string) {
	c.t.Helper()
	c.send(req)
	c.expect(want)
}

// quiet checks that nothing arrives for d (a deferred reply is still held).
func (c *client) quiet(d time.Duration) {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(d))
	defer c.nc.SetReadDeadline(time.Time{})
	if _, err := c.br.Peek(1); err == nil {
		b, _ := c.br.Peek(c.br.Buffered())
		c.t.Fatalf("%s: unexpected reply %q", c.name, b)
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		c.t.Fatalf("%s: %v while waiting for silence", c.name, err)
	}
}

// eof expects the server to close the connection.
func (c *client) eof() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(replyTimeout))
	if b, err := c.br.ReadByte(); !errors.Is(err, io.EOF) {
		c.t.Fatalf("%s: want EOF, got %q %v", c.name, b, err)
	}
}

// frame reads one PMI-2 reply, checks its header is "%6d" of the exact
// payload length, and returns the payload.
func (c *client) frame() string {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(replyTimeout))
	var h [6]byte
	if _, err := io.ReadFull(c.br, h[:]); err != nil {
		c.t.Fatalf("%s: read header: %v", c.name, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(h[:])))
	if err != nil || string(h[:]) != fmt.Sprintf("%6d", n) {
		c.t.Fatalf("%s: bad header %q", c.name, h)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(c.br, p); err != nil {
		c.t.Fatalf("%s: read payload: %v", c.name, err)
	}
	return string(p)
}

// expectFrame reads one PMI-2 reply and compares its payload exactly.
func (c *client) expectFrame(want string) {
	c.t.Helper()
	if got := c.frame(); got != want {
		c.t.Fatalf("%s: got  %q\nwant %q", c.name, got, want)
	}
}

// send2 frames payload as MPICH ≥ 4.1 does ("%6d", exact length).
func (c *client) send2(payload string) {
	c.t.Helper()
	c.sendRaw([]byte(fmt.Sprintf("%6d", len(payload)) + payload))
}

// coordinator is the launcher's side of the barrier for in-process hosts: it
// waits for every host's Fence of a seq, merges the puts and answers all.
type coordinator struct {
	hosts int

	mu     sync.Mutex
	rounds map[int]*round
}

type round struct {
	calls   map[int]int // host → Fence calls for this seq
	puts    map[string]string
	done    chan struct{}
	waiting []func(map[string]string, error) // asyncHost's dones
}

// fenceFunc adapts a function to the Fencer interface.
type fenceFunc func(ctx context.Context, seq int, puts map[string]string) (map[string]string, error)

func (f fenceFunc) Fence(ctx context.Context, seq int, puts map[string]string) (map[string]string, error) {
	return f(ctx, seq, puts)
}

func newCoordinator(hosts int) *coordinator {
	return &coordinator{hosts: hosts, rounds: make(map[int]*round)}
}

// host returns host h's Fencer.
func (c *coordinator) host(h int) Fencer {
	return fenceFunc(func(ctx context.Context, seq int, puts map[string]string) (map[string]string, error) {
		c.mu.Lock()
		r, ok := c.rounds[seq]
		if !ok {
			r = &round{calls: make(map[int]int), puts: make(map[string]string), done: make(chan struct{})}
			c.rounds[seq] = r
		}
		r.calls[h]++
		maps.Copy(r.puts, puts)
		if len(r.calls) == c.hosts {
			close(r.done)
		}
		c.mu.Unlock()
		select {
		case <-r.done:
			return r.puts, nil // read-only once done
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	})
}

// asyncHost returns host h's Fencer as an AsyncFencer, as the agent's
// session has it: no goroutine waits, and the last host's FenceAsync
// completes every host's barrier from its own goroutine (the launcher's
// answer arriving on each host's session loop).
func (c *coordinator) asyncHost(h int) AsyncFencer {
	return asyncFencer{c: c, h: h}
}

type asyncFencer struct {
	c *coordinator
	h int
}

func (f asyncFencer) Fence(context.Context, int, map[string]string) (map[string]string, error) {
	panic("the server calls FenceAsync when its Fencer has it")
}

func (f asyncFencer) FenceAsync(seq int, puts map[string]string, done func(map[string]string, error)) {
	c := f.c
	c.mu.Lock()
	r, ok := c.rounds[seq]
	if !ok {
		r = &round{calls: make(map[int]int), puts: make(map[string]string), done: make(chan struct{})}
		c.rounds[seq] = r
	}
	r.calls[f.h]++
	maps.Copy(r.puts, puts)
	r.waiting = append(r.waiting, done)
	var release []func(map[string]string, error)
	if len(r.calls) == c.hosts {
		close(r.done)
		release = r.waiting
	}
	c.mu.Unlock()
	for _, d := range release {
		d(r.puts, nil) // read-only once done
	}
}

// calls returns, per seq, how many times each host fenced.
func (c *coordinator) calls() map[int]map[int]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int]map[int]int)
	for seq, r := range c.rounds {
		out[seq] = maps.Clone(r.calls)
	}
	return out
}

// fenced reports whether key went through any barrier.
func (c *coordinator) fenced(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.rounds {
		if _, ok := r.puts[key]; ok {
			return true
		}
	}
	return false
}

// newTestServer starts a server closed at the end of the test.
func newTestServer(t *testing.T, job Job, local []int, f Fencer, ev Events) *Server {
	t.Helper()
	var mu sync.Mutex
	var trace []string
	if ev.debug == nil {
		ev.debug = func(format string, args ...any) {
			mu.Lock()
			trace = append(trace, fmt.Sprintf(format, args...))
			mu.Unlock()
		}
	}
	s, err := NewServer(t.Context(), job, local, f, ev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		if t.Failed() {
			mu.Lock()
			defer mu.Unlock()
			t.Logf("PMI trace of server %v:\n%s", local, strings.Join(trace, "\n"))
		}
	})
	return s
}

// eventLog records Events for assertions.
type eventLog struct {
	mu          sync.Mutex
	aborts      []string
	disconnects []string
	changed     chan struct{}
}

func newEventLog() *eventLog { return &eventLog{changed: make(chan struct{}, 100)} }

func (l *eventLog) events() Events {
	return Events{
		Abort: func(rank, code int, msg string) {
			l.mu.Lock()
			l.aborts = append(l.aborts, fmt.Sprintf("%d:%d:%s", rank, code, msg))
			l.mu.Unlock()
			l.changed <- struct{}{}
		},
		disconnect: func(rank int, finalized bool) {
			l.mu.Lock()
			l.disconnects = append(l.disconnects, fmt.Sprintf("%d:%v", rank, finalized))
			l.mu.Unlock()
			l.changed <- struct{}{}
		},
	}
}

// wait waits until pred holds over the log.
func (l *eventLog) wait(t *testing.T, what string, pred func(aborts, disconnects []string) bool) {
	t.Helper()
	deadline := time.After(replyTimeout)
	for {
		l.mu.Lock()
		ok := pred(l.aborts, l.disconnects)
		a, d := l.aborts, l.disconnects
		l.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-l.changed:
		case <-deadline:
			t.Fatalf("timed out waiting for %s: aborts %q disconnects %q", what, a, d)
		}
	}
}
