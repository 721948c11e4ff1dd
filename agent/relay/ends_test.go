package relay

import (
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// recUp records what a relay sends up: its Ends, and the kinds of the
// envelopes it sends with their hosts.
type recUp struct {
	delay     time.Duration // before an Ends but a Last is recorded: a slow send
	mu        sync.Mutex
	ends      []wire.Ends
	envelopes []string
	more      chan struct{}
}

func newRecUp() *recUp { return &recUp{more: make(chan struct{}, 16)} }

func (u *recUp) Send(k wire.Kind, v any) error {
	if k == wire.KindEnds {
		if !v.(*wire.Ends).Last {
			time.Sleep(u.delay) // a write that takes its time
		}
		u.mu.Lock()
		u.ends = append(u.ends, *v.(*wire.Ends))
		u.mu.Unlock()
		u.more <- struct{}{}
	}
	return nil
}

func (u *recUp) SendEnvelope(_ wire.Kind, host int, inner wire.Kind, _ []byte) error {
	u.mu.Lock()
	u.envelopes = append(u.envelopes, inner.String()+" of "+string(rune('0'+host)))
	u.mu.Unlock()
	return nil
}

// sent is the Ends sent so far.
func (u *recUp) sent() []wire.Ends {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]wire.Ends(nil), u.ends...)
}

// await waits for the n-th Ends.
func (u *recUp) await(t *testing.T, n int) []wire.Ends {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for len(u.sent()) < n {
		select {
		case <-u.more:
		case <-deadline:
			t.Fatalf("%d ends sent, want %d: %+v", len(u.sent()), n, u.sent())
		}
	}
	return u.sent()
}

func endsMsg(t *testing.T, e wire.Ends) wire.Msg {
	t.Helper()
	p, err := wire.Encode(wire.KindEnds, e)
	if err != nil {
		t.Fatal(err)
	}
	return wire.Msg{Kind: wire.KindEnds, Payload: p.Payload()}
}

// endsRelay is relay host 4 whose own host runs ranks and whose children
// 5 and 9 were given the job, told Hello.Ends (and FenceSpans: spans).
func endsRelay(t *testing.T, spans bool) (*Relay, *recUp) {
	up := newRecUp()
	r := New(t.Context(), up, zaptest.NewLogger(t))
	t.Cleanup(r.Close)
	r.self = 4
	r.SetEnds(true)
	r.SetFenceSpans(spans)
	r.OwnJob(true)
	r.started = map[int]bool{5: true, 9: true}
	return r, up
}

func setEndsWait(t *testing.T, normal, stop time.Duration) {
	oldN, oldS := endsWait, endsStopWait
	endsWait, endsStopWait = normal, stop
	t.Cleanup(func() { endsWait, endsStopWait = oldN, oldS })
}

// TestEndsSubtree: a relay sends its subtree's ends once, when its own
// host and every child it started have ended: its own (Self) apart, its
// children's and theirs as hosts, or as spans when the launcher takes
// them, with the count of their ranks the launcher stopped summed; a
// child whose rank failed has its Done passed up at once, in an
// envelope, and is not named.
func TestEndsSubtree(t *testing.T) {
	setEndsWait(t, time.Hour, time.Hour)
	for _, spans := range []bool{false, true} {
		r, up := endsRelay(t, spans)
		c5, c9 := &child{host: 5, name: "n5"}, &child{host: 9, name: "n9"}
		if taken, err := r.childEnds(c5, endsMsg(t, wire.Ends{Done: true, Last: true})); !taken || err != nil {
			t.Fatalf("child 5's ends: taken %v, %v", taken, err)
		}
		if taken, err := r.childEnds(c9, endsMsg(t, wire.Ends{Self: true, Hosts: []int{10, 12}, Stopped: 5, Last: true})); !taken || err != nil {
			t.Fatalf("child 9's ends: taken %v, %v", taken, err)
		}
		if got := up.sent(); len(got) != 0 {
			t.Fatalf("spans %v: ends %+v before the relay's own host ended", spans, got)
		}
		if !r.OwnEnded(true, 3) {
			t.Fatal("own end not taken with children started")
		}
		want := wire.Ends{Self: true, Hosts: []int{9, 10, 12}, Stopped: 8, Last: true}
		if spans {
			want = wire.Ends{Self: true, Spans: [][2]int{{9, 10}, {12, 12}}, Stopped: 8, Last: true}
		}
		if got := up.await(t, 1); !reflect.DeepEqual(got, []wire.Ends{want}) {
			t.Errorf("spans %v: ends %+v, want %+v", spans, got, want)
		}
		if !reflect.DeepEqual(up.envelopes, []string{"done of 5"}) {
			t.Errorf("spans %v: envelopes %v, want child 5's done alone", spans, up.envelopes)
		}
	}
}

// TestEndsWaitBounded: what a relay holds goes up within endsWait when a
// child does not end (without Last), the rest when it does; once the job
// is stopped within endsStopWait; and before a Cut, so that a host known
// to have ended is not counted lost.
func TestEndsWaitBounded(t *testing.T) {
	t.Run("a child runs on", func(t *testing.T) {
		setEndsWait(t, 50*time.Millisecond, time.Hour)
		r, up := endsRelay(t, false)
		if _, err := r.childEnds(&child{host: 5, name: "n5"}, endsMsg(t, wire.Ends{Self: true, Last: true})); err != nil {
			t.Fatal(err)
		}
		r.OwnEnded(false, 2) // its stopped ranks' exits went up as they came
		got := up.await(t, 1)
		if want := (wire.Ends{Done: true, Hosts: []int{5}}); !reflect.DeepEqual(got[0], want) {
			t.Errorf("after the wait: %+v, want %+v", got[0], want)
		}
		if _, err := r.childEnds(&child{host: 9, name: "n9"}, endsMsg(t, wire.Ends{Self: true, Stopped: 1, Last: true})); err != nil {
			t.Fatal(err)
		}
		if got := up.await(t, 2); !reflect.DeepEqual(got[1], wire.Ends{Hosts: []int{9}, Stopped: 1, Last: true}) {
			t.Errorf("at the last child's end: %+v", got[1])
		}
	})
	t.Run("stopped", func(t *testing.T) {
		setEndsWait(t, time.Hour, 20*time.Millisecond)
		r, up := endsRelay(t, false)
		if _, err := r.childEnds(&child{host: 5, name: "n5"}, endsMsg(t, wire.Ends{Self: true, Stopped: 8, Last: true})); err != nil {
			t.Fatal(err)
		}
		r.Stopped()
		if got := up.await(t, 1); !reflect.DeepEqual(got[0], wire.Ends{Hosts: []int{5}, Stopped: 8}) {
			t.Errorf("after the stop: %+v", got[0])
		}
	})
	t.Run("a child lost", func(t *testing.T) {
		setEndsWait(t, time.Hour, time.Hour)
		r, up := endsRelay(t, false)
		if _, err := r.childEnds(&child{host: 5, name: "n5"}, endsMsg(t, wire.Ends{Self: true, Last: true})); err != nil {
			t.Fatal(err)
		}
		r.OwnEnded(true, 0)
		r.mu.Lock()
		delete(r.started, 9)
		held, due := r.childGone(9)
		r.mu.Unlock()
		if !reflect.DeepEqual(held, &wire.Ends{Self: true, Hosts: []int{5}}) || !reflect.DeepEqual(due, &wire.Ends{Last: true}) {
			t.Errorf("child 9 lost: held %+v, then %+v; want self and 5 before its cut, last after", held, due)
		}
		if len(up.sent()) != 0 {
			t.Errorf("sent %+v before the cut", up.sent())
		}
	})
}

// TestEndsViolations: a child's ends with spans (no child of a relay is
// told to send them) is its protocol violation; a child's ends after its
// Last, or from a child not started through this relay, or to a relay
// not told Hello.Ends, are passed on as they are (the launcher takes
// them as the child's); a relay with no child started leaves its own
// host's end to its session.
func TestEndsViolations(t *testing.T) {
	setEndsWait(t, time.Hour, time.Hour)
	r, _ := endsRelay(t, false)
	c5 := &child{host: 5, name: "n5"}
	if _, err := r.childEnds(c5, endsMsg(t, wire.Ends{Spans: [][2]int{{6, 8}}})); err == nil || !strings.Contains(err.Error(), "protocol violation of n5: its ends name spans") {
		t.Errorf("spans: %v", err)
	}
	if _, err := r.childEnds(c5, endsMsg(t, wire.Ends{Self: true, Last: true})); err != nil {
		t.Fatal(err)
	}
	if taken, err := r.childEnds(c5, endsMsg(t, wire.Ends{Hosts: []int{6}})); taken || err != nil {
		t.Errorf("ends after the child's last: taken %v, %v; want passed on", taken, err)
	}
	if taken, err := r.childEnds(&child{host: 7, name: "n7"}, endsMsg(t, wire.Ends{Self: true, Last: true})); taken || err != nil {
		t.Errorf("a child not started here: taken %v, %v; want passed on", taken, err)
	}
	if _, err := r.childEnds(c5, wire.Msg{Kind: wire.KindEnds, Payload: []byte(`{"self":true,"done":true}`)}); err == nil {
		t.Error("ends both self and done taken")
	}

	off := New(t.Context(), newRecUp(), zaptest.NewLogger(t))
	defer off.Close()
	off.started = map[int]bool{5: true}
	off.OwnJob(true)
	if taken, err := off.childEnds(c5, endsMsg(t, wire.Ends{Self: true, Last: true})); taken || err != nil {
		t.Errorf("not told Hello.Ends: taken %v, %v", taken, err)
	}
	if off.OwnEnded(true, 0) {
		t.Error("not told Hello.Ends: own end taken")
	}
	alone := New(t.Context(), newRecUp(), zaptest.NewLogger(t))
	defer alone.Close()
	alone.SetEnds(true)
	if alone.OwnEnded(true, 0) {
		t.Error("no child started: own end taken")
	}
}

// TestEndsOrder: children ending together while what is held keeps
// going up after its wait (1 ms here): every host named once, and the
// Last the relay's final Ends, never followed by another (its relay
// would take a later one for the child's alone).
func TestEndsOrder(t *testing.T) {
	setEndsWait(t, time.Millisecond, time.Millisecond)
	for round := range 20 {
		up := newRecUp()
		up.more = make(chan struct{}, 1024)
		up.delay = 200 * time.Microsecond
		r := New(t.Context(), up, zaptest.NewLogger(t))
		r.self = 0
		r.SetEnds(true)
		r.OwnJob(true)
		r.started = map[int]bool{}
		const kids = 64
		for h := 1; h <= kids; h++ {
			r.started[h] = true
		}
		var wg sync.WaitGroup
		for h := 1; h <= kids; h++ {
			wg.Go(func() {
				time.Sleep(time.Duration(h) * 30 * time.Microsecond)
				if h == kids/2 {
					r.OwnEnded(true, 0)
				}
				if _, err := r.childEnds(&child{host: h, name: "n"}, endsMsg(t, wire.Ends{Self: true, Last: true})); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		got := up.sent()
		r.Close()
		seen := map[int]int{}
		self := 0
		for i, e := range got {
			if e.Last != (i == len(got)-1) {
				t.Fatalf("round %d: ends %d of %d marked last %v: %+v", round, i+1, len(got), e.Last, got)
			}
			if e.Self {
				self++
			}
			for _, h := range e.Hosts {
				seen[h]++
			}
		}
		if len(seen) != kids || self != 1 {
			t.Fatalf("round %d: hosts %v, self %d times", round, seen, self)
		}
		for h, n := range seen {
			if n != 1 {
				t.Fatalf("round %d: host %d named %d times", round, h, n)
			}
		}
	}
}
