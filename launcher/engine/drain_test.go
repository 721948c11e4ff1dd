package engine

import (
	"encoding/json"
	"io"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// notifyingStream is what the agent tree's links are to the engine: a
// message queue that says when messages wait (transport.Notifier) and is
// polled (wire.MsgPoller), fed here by a producer goroutine.
type notifyingStream struct {
	mu    sync.Mutex
	msgs  []wire.Msg
	err   error
	ready func()

	// late, when set, is called on each poll that finds nothing waiting,
	// as the poll returns: messages arriving just as a drain ends.
	late func()
}

func (q *notifyingStream) Read([]byte) (int, error)  { return 0, io.ErrNoProgress }
func (q *notifyingStream) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }
func (q *notifyingStream) Close() error              { return nil }
func (q *notifyingStream) SendMsg(wire.Msg) error    { return nil }
func (q *notifyingStream) RecvMsg() (wire.Msg, error) {
	panic("a notifying session was read by a blocking reader")
}

func (q *notifyingStream) PollMsg() (wire.Msg, bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.msgs) == 0 {
		if late := q.late; late != nil && q.err == nil {
			q.mu.Unlock()
			late()
			q.mu.Lock()
		}
		return wire.Msg{}, false, q.err
	}
	m := q.msgs[0]
	q.msgs = q.msgs[1:]
	return m, true, nil
}

func (q *notifyingStream) Notify(ready func()) {
	q.mu.Lock()
	q.ready = ready
	now := len(q.msgs) > 0 || q.err != nil
	q.mu.Unlock()
	if now {
		ready()
	}
}

func (q *notifyingStream) push(m wire.Msg, err error) {
	q.mu.Lock()
	if err != nil {
		q.err = err
	} else {
		q.msgs = append(q.msgs, m)
	}
	ready := q.ready
	q.mu.Unlock()
	if ready != nil {
		ready()
	}
}

// TestDrainOrder: sessions of the agent tree have no reader goroutine of
// their own; drains started as messages arrive hand every message of each
// host to the job, in the host's order, and its end last, however the
// arrivals race the drains' ends; once the job closes, no drain runs.
func TestDrainOrder(t *testing.T) {
	const hosts, perHost = 8, 3000
	j := &job{log: zap.NewNop(), events: make(chan any, 1), quit: make(chan struct{})}
	streams := make([]*notifyingStream, hosts)
	for i := range hosts {
		streams[i] = &notifyingStream{}
		s := &session{idx: i, conn: wire.NewConn(streams[i]), readDone: make(chan struct{}), notify: streams[i]}
		j.sessions = append(j.sessions, s)
		if i%2 == 0 {
			// Half have messages waiting before the job reads them.
			streams[i].push(exitMsg(t, 0), nil)
		}
		s.notify.Notify(func() { j.ready(s) })
	}
	var producers sync.WaitGroup
	for i, q := range streams {
		producers.Go(func() {
			first := 0
			if i%2 == 0 {
				first = 1
			}
			for r := first; r < perHost; r++ {
				q.push(exitMsg(t, r), nil)
			}
			q.push(wire.Msg{}, io.EOF)
		})
	}
	next := make([]int, hosts)
	lost := 0
	for lost < hosts {
		var ev any
		select {
		case ev = <-j.events:
		case <-time.After(20 * time.Second):
			t.Fatalf("no event for 20 s: messages left unread (hosts at %v of %d)", next, perHost)
		}
		switch ev := j.cook(ev).(type) { // as the job takes them
		case evExit:
			if ev.x.Rank != next[ev.host] {
				t.Fatalf("host %d: rank %d's exit came where %d's was due", ev.host, ev.x.Rank, next[ev.host])
			}
			next[ev.host]++
		case evLost:
			if next[ev.host] != perHost {
				t.Fatalf("host %d lost after %d of its %d messages", ev.host, next[ev.host], perHost)
			}
			lost++
		default:
			t.Fatalf("unexpected event %#v", ev)
		}
	}
	producers.Wait()
	for _, s := range j.sessions {
		<-s.readDone
	}
	close(j.quit)
	j.rmu.Lock()
	j.closing = true
	j.rmu.Unlock()
	j.readers.Wait()
	// A word after the close starts nothing.
	s := &session{idx: 0, conn: wire.NewConn(&notifyingStream{}), readDone: make(chan struct{})}
	j.ready(s)
	if s.draining.Load() {
		t.Error("a drain was started after the job closed")
	}
}

// TestDrainLateArrival: a message that arrives as a drain ends (after
// its last poll found nothing, before it stands down) is still read.
func TestDrainLateArrival(t *testing.T) {
	const n = 100
	j := &job{log: zap.NewNop(), events: make(chan any, 1), quit: make(chan struct{})}
	q := &notifyingStream{}
	sent := 0
	q.late = func() {
		// The drain's own goroutine, between its empty poll and its end.
		sent++
		if sent < n {
			q.push(exitMsg(t, sent), nil)
		} else {
			q.push(wire.Msg{}, io.EOF)
		}
	}
	q.push(exitMsg(t, 0), nil)
	s := &session{idx: 0, conn: wire.NewConn(q), readDone: make(chan struct{}), notify: q}
	s.notify.Notify(func() { j.ready(s) })
	for want := 0; ; want++ {
		var ev any
		select {
		case ev = <-j.events:
		case <-time.After(10 * time.Second):
			t.Fatalf("no event for 10 s after %d exits: a late message was left unread", want)
		}
		ev = j.cook(ev) // as the job takes them
		if _, ok := ev.(evLost); ok {
			if want != n {
				t.Fatalf("lost after %d exits, want %d", want, n)
			}
			break
		}
		if x, ok := ev.(evExit); !ok || x.x.Rank != want {
			t.Fatalf("event %#v, want rank %d's exit", ev, want)
		}
	}
	<-s.readDone
	close(j.quit)
	j.readers.Wait()
}

func exitMsg(t *testing.T, rank int) wire.Msg {
	p, err := json.Marshal(wire.Exit{Rank: rank})
	if err != nil {
		t.Fatal(err)
	}
	return wire.Msg{Kind: wire.KindExit, Payload: p}
}

// TestDrainsDoNotWaitForTheLoop: a message from each of a thousand hosts
// while the job's loop is busy (here: takes nothing) waits in the job's
// events, not in a drain per host parked until the loop takes it; every
// drain ends.
func TestDrainsDoNotWaitForTheLoop(t *testing.T) {
	const hosts = 1000
	j := &job{log: zap.NewNop(), events: newEvents(hosts), quit: make(chan struct{})}
	t.Cleanup(func() { close(j.quit); j.readers.Wait() })
	for i := range hosts {
		q := &notifyingStream{}
		s := &session{idx: i, conn: wire.NewConn(q), readDone: make(chan struct{}), notify: q}
		j.sessions = append(j.sessions, s)
		s.notify.Notify(func() { j.ready(s) })
		q.push(exitMsg(t, 0), nil)
	}
	ended := make(chan struct{})
	go func() { j.readers.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatalf("after 20 s, drains still wait to hand over %d of the %d hosts' messages", hosts-len(j.events), hosts)
	}
	if len(j.events) != hosts {
		t.Fatalf("%d events, want %d", len(j.events), hosts)
	}
}

// TestDrainEnds: a relay's Ends for hosts whose own messages still wait
// (their relay read their output and exits before it sent the Ends, on
// its own stream) has each such host's end come after those messages,
// from its drain; a host with nothing waiting ends with the relay's
// event. Each host's end comes once.
func TestDrainEnds(t *testing.T) {
	const hosts, perHost = 64, 200
	j := &job{log: zap.NewNop(), events: make(chan any, 16), quit: make(chan struct{})}
	t.Cleanup(func() { close(j.quit); j.readers.Wait() })
	streams := make([]*notifyingStream, hosts)
	for i := range hosts {
		streams[i] = &notifyingStream{}
		s := &session{idx: i, conn: wire.NewConn(streams[i]), readDone: make(chan struct{}), notify: streams[i]}
		j.sessions = append(j.sessions, s)
		s.notify.Notify(func() { j.ready(s) })
	}
	// Host 0 is the relay; the others' messages are queued, as the
	// transport queues them before their relay's Ends, the odd ones'
	// all taken before the Ends, the even ones' not.
	var ended []int
	for i := 1; i < hosts; i++ {
		for r := range perHost {
			streams[i].push(exitMsg(t, r), nil)
		}
		ended = append(ended, i)
	}
	next := make([]int, hosts)
	take := func(ev any) []int {
		switch ev := j.cook(ev).(type) {
		case evExit:
			if got := ev.x.Rank; got != next[ev.host] {
				t.Fatalf("host %d: rank %d's exit where %d's was due", ev.host, got, next[ev.host])
			}
			next[ev.host]++
		case evEnds:
			for _, h := range ev.hosts {
				if next[h] != perHost {
					t.Fatalf("host %d's end after %d of its %d messages", h, next[h], perHost)
				}
			}
			return ev.hosts
		default:
			t.Fatalf("unexpected event %#v", ev)
		}
		return nil
	}
	for i := 1; i < hosts; i += 2 {
		for next[i] < perHost {
			take(<-j.events)
		}
	}
	e := wire.Ends{Hosts: ended, Last: true}
	ev := evEnds{host: 0, e: e, hosts: j.endedHosts(e)}
	seen := map[int]int{}
	for _, h := range ev.hosts {
		seen[h]++
	}
	for len(seen) < hosts-1 {
		var ev any
		select {
		case ev = <-j.events:
		case <-time.After(20 * time.Second):
			t.Fatalf("no event for 20 s: %d of %d hosts ended", len(seen), hosts-1)
		}
		for _, h := range take(ev) {
			seen[h]++
		}
	}
	for h, n := range seen {
		if n != 1 {
			t.Errorf("host %d ended %d times", h, n)
		}
	}
}
