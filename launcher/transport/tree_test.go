package transport

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
)

func TestTreeShape(t *testing.T) {
	var parents []int
	for i := range 7 {
		parents = append(parents, TreeParent(i, 2))
	}
	if want := []int{-1, -1, 0, 0, 1, 1, 2}; !slices.Equal(parents, want) {
		t.Errorf("width 2 parents %v, want %v", parents, want)
	}
	for i := range 4 {
		if p := TreeParent(i, 1); p != i-1 {
			t.Errorf("width 1 (a chain): parent of %d is %d", i, p)
		}
	}
	for _, c := range []struct{ n, k, depth int }{
		{1, 0, 1}, {16, 0, 1}, {2, 2, 1}, {3, 2, 2}, {6, 2, 2}, {7, 2, 3}, {32, 32, 1}, {33, 32, 2},
		{1056, 32, 2}, {1057, 32, 3}, {10000, 32, 3}, {4, 1, 4},
	} {
		if d := TreeDepth(c.n, c.k); d != c.depth {
			t.Errorf("TreeDepth(%d, %d) = %d, want %d", c.n, c.k, d, c.depth)
		}
	}
	for _, c := range []struct{ w, n, want int }{
		{TreeAuto, 16, 0}, {TreeAuto, 255, 0}, {TreeAuto, 256, 32}, {TreeAuto, 10000, 32},
		{0, 10000, 0}, {2, 2, 0}, {2, 3, 2}, {4, 16, 4}, {1, 2, 1},
	} {
		if w := TreeWidth(c.w, c.n); w != c.want {
			t.Errorf("TreeWidth(%d, %d) = %d, want %d", c.w, c.n, w, c.want)
		}
	}
	// treeChildren is TreeParent's inverse: every host in a node's range
	// has it as parent, and the ranges cover every host but the first
	// level once.
	for _, k := range []int{1, 2, 3, 32} {
		const n = 1000
		covered := 0
		for i := range n {
			lo, hi := treeChildren(i, k, n)
			for j := lo; j < hi; j++ {
				if p := TreeParent(j, k); p != i {
					t.Fatalf("width %d: %d in %d's children, but its parent is %d", k, j, i, p)
				}
			}
			covered += max(hi-lo, 0)
		}
		if covered != n-min(k, n) {
			t.Errorf("width %d: children cover %d hosts, want %d", k, covered, n-min(k, n))
		}
	}
	// Every host's parent comes before it, so a host's relay is dialed
	// first; every relay has at most k children.
	for _, k := range []int{1, 2, 3, 32} {
		kids := map[int]int{}
		for i := range 2000 {
			p := TreeParent(i, k)
			if p >= i {
				t.Fatalf("width %d: host %d's parent %d is not before it", k, i, p)
			}
			kids[p]++
			if kids[p] > k {
				t.Fatalf("width %d: %d has more than %d children", k, p, k)
			}
		}
	}
}

// newTestTree is a tree of width over hosts, every node down, with base
// (nil: none) beneath it.
func newTestTree(hosts []hostfile.Host, width int, base treeBase) *Tree {
	n := len(hosts)
	tr := &Tree{hosts: hosts, index: map[nodeKey]int{}, width: width, base: base, log: zap.NewNop(), nodes: make([]*node, n), top: make([]atomic.Pointer[link], n), roots: map[int]*link{}, relayWait: defaultRelayWait}
	for i, h := range hosts {
		tr.index[treeKey(h)] = i
		tr.nodes[i] = &node{t: tr, i: i, h: h, up: make(chan struct{})}
	}
	return tr
}

// testTree is a tree of width 1 over hosts a, b, c whose first link (a)
// runs over a pipe; the far end is what a's agent would read and write.
func testTree(t *testing.T) (root, mid, leaf *link, agent *wire.Conn) {
	t.Helper()
	hosts := []hostfile.Host{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	tr := newTestTree(hosts, 1, nil)
	near, far := net.Pipe()
	root = newLink(tr.nodes[0], nil)
	root.raw = wire.NewConn(near)
	mid = newLink(tr.nodes[1], root)
	root.kids = map[int]*link{1: mid}
	leaf = newLink(tr.nodes[2], mid)
	mid.kids = map[int]*link{2: leaf}
	root.readers.Go(root.readRaw)
	agent = wire.NewConn(far)
	t.Cleanup(func() { far.Close(); root.Close() })
	return root, mid, leaf, agent
}

// TestLinkWritesEnvelopes: messages the engine sends to a host two
// levels down leave as envelopes inside envelopes, each whole (a 70,000-
// byte stdin frame too); the link takes no bytes, only messages.
func TestLinkWritesEnvelopes(t *testing.T) {
	_, _, leaf, agent := testTree(t)
	var frames bytes.Buffer
	w := wire.NewConn(pipeConn{bytes.NewReader(nil), &frames})
	lc := wire.NewConn(leaf)
	send := func(c *wire.Conn) {
		_ = c.Send(wire.KindHello, wire.Hello{Version: wire.Version, Host: "c"})
		_ = c.SendStdin(3, bytes.Repeat([]byte("x"), 70000))
		_ = c.Send(wire.KindPing, nil)
	}
	send(w) // what the agent should get, framed
	go send(lc)
	if _, err := leaf.Write([]byte{byte(wire.KindPing), 0, 0, 0, 0}); err == nil {
		t.Error("a link took bytes")
	}
	r := wire.NewConn(pipeConn{&frames, io.Discard})
	for range 3 {
		m, err := agent.Recv()
		if err != nil {
			t.Fatal(err)
		}
		want, _ := r.Recv()
		host, in, err := m.Envelope()
		if err != nil || m.Kind != wire.KindRelay || host != 1 || in.Kind != wire.KindRelay {
			t.Fatalf("outer: %s host %d inner %s err %v", m.Kind, host, in.Kind, err)
		}
		host, in, err = in.Envelope()
		if err != nil || host != 2 || in.Kind != want.Kind || !bytes.Equal(in.Payload, want.Payload) {
			t.Fatalf("inner: host %d %s (%d bytes), want %s (%d bytes), err %v", host, in.Kind, len(in.Payload), want.Kind, len(want.Payload), err)
		}
	}
}

// TestLinkDelivers: envelopes from the relay reach the host they name,
// in order; a Cut ends that host's stream; losing the relay cuts off
// every host behind it, named after the relay.
func TestLinkDelivers(t *testing.T) {
	root, mid, leaf, agent := testTree(t)
	inner := wire.AppendEnvelope(nil, 2, wire.KindOutput, append([]byte{0, 0, 0, 5, byte(wire.Stdout)}, "line 1\n"...))
	if err := agent.SendEnvelope(wire.KindRelayed, 1, wire.KindRelayed, inner); err != nil {
		t.Fatal(err)
	}
	if err := agent.SendEnvelope(wire.KindRelayed, 1, wire.KindDone, nil); err != nil {
		t.Fatal(err)
	}
	if err := agent.Send(wire.KindReady, wire.Ready{}); err != nil {
		t.Fatal(err)
	}
	lc := wire.NewConn(leaf)
	m, err := lc.Recv()
	if err != nil || m.Kind != wire.KindOutput {
		t.Fatalf("leaf got %s, %v", m.Kind, err)
	}
	if _, _, data, _ := m.Output(); string(data) != "line 1\n" {
		t.Errorf("leaf's output %q", data)
	}
	if m, err := wire.NewConn(mid).Recv(); err != nil || m.Kind != wire.KindDone {
		t.Fatalf("mid got %s, %v", m.Kind, err)
	}
	if m, err := wire.NewConn(root).Recv(); err != nil || m.Kind != wire.KindReady {
		t.Fatalf("root got %s, %v", m.Kind, err)
	}
	agent.Close() // the relay is lost
	_, err = lc.Recv()
	var cut *CutOffError
	if !errors.As(err, &cut) || cut.Relay != "a" {
		t.Fatalf("leaf's error %v, want cut off by a", err)
	}
	if _, err := wire.NewConn(mid).Recv(); !errors.As(err, &cut) || cut.Relay != "a" {
		t.Fatalf("mid's error %v, want cut off by a", err)
	}
}

// TestLinkCut: a relay's Cut ends that child's stream with the relay's
// reason; its siblings go on.
func TestLinkCut(t *testing.T) {
	_, mid, leaf, agent := testTree(t)
	cut, _ := wire.Encode(wire.KindCut, wire.Cut{Host: 2, Err: "c answered no keepalive for 15s"})
	if err := agent.SendEnvelope(wire.KindRelayed, 1, wire.KindCut, cut.Payload()); err != nil {
		t.Fatal(err)
	}
	if err := agent.SendEnvelope(wire.KindRelayed, 1, wire.KindDone, nil); err != nil {
		t.Fatal(err)
	}
	_, err := wire.NewConn(leaf).Recv()
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("relay b lost it: c answered no keepalive")) {
		t.Fatalf("leaf's error %v", err)
	}
	if m, err := wire.NewConn(mid).Recv(); err != nil || m.Kind != wire.KindDone {
		t.Fatalf("mid got %s, %v", m.Kind, err)
	}
}

// TestLinkAgentSaid: a relay's agent that sends an Error and then closes
// its stream (it was stopped) ends its link with its words, not a bare
// EOF, and its subtree is cut off with them: the engine reports the
// relay and the hosts behind it with why, whichever it handles first.
// An agent that closes without a word ends it with EOF, as before.
func TestLinkAgentSaid(t *testing.T) {
	for _, c := range []struct {
		name, said string
		stopped    bool   // wire.Error.Stopped
		why        string // the cut-off hosts' CutOffError.Why
	}{
		{"stopped", "the agent was stopped (SIGTERM); its ranks are stopped", true, "the agent was stopped (SIGTERM); its ranks are stopped"},
		{"error", "bad frame", false, "it reported an error: bad frame"},
		{"silent", "", false, "connection closed"},
		{"long", strings.Repeat("x", maxSaid+10), false, "it reported an error: " + strings.Repeat("x", maxSaid) + "... (10 more bytes)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root, mid, leaf, agent := testTree(t)
			if c.said != "" {
				if err := agent.Send(wire.KindError, wire.Error{Msg: c.said, Stopped: c.stopped}); err != nil {
					t.Fatal(err)
				}
				// The engine gets the Error itself too.
				if m, err := root.RecvMsg(); err != nil || m.Kind != wire.KindError {
					t.Fatalf("root got %s, %v; want the Error", m.Kind, err)
				}
			}
			agent.Close()
			_, err := root.RecvMsg()
			if !errors.Is(err, io.EOF) || (c.said != "" && err.Error() != c.why) {
				t.Errorf("root's end %q (EOF: %v)", err, errors.Is(err, io.EOF))
			}
			for _, l := range []*link{mid, leaf} {
				_, err := l.RecvMsg()
				var cut *CutOffError
				if !errors.As(err, &cut) || cut.Relay != "a" || cut.Why() != c.why {
					t.Errorf("%s's end %v, want cut off by a: %s", l.n.h.Name, err, c.why)
				}
			}
		})
	}
}

// pipeConn is a stream reading from r and writing to w.
type pipeConn struct {
	r io.Reader
	w io.Writer
}

func (p pipeConn) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p pipeConn) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p pipeConn) Close() error                { return nil }

// TestInQueue: a linked host's messages reach the engine whole and in
// order; the link's end comes after what was queued before it, and
// nothing is queued after it; a drained queue holds nothing.
func TestInQueue(t *testing.T) {
	var q inQueue
	q.init()
	q.push(wire.Msg{Kind: wire.KindFacts, Payload: []byte(`{"version":6}`)})
	q.push(wire.Msg{Kind: wire.KindPing})
	m, err := q.recv()
	if err != nil || m.Kind != wire.KindFacts || string(m.Payload) != `{"version":6}` {
		t.Fatalf("recv: %v %q %v", m.Kind, m.Payload, err)
	}
	q.push(wire.Msg{Kind: wire.KindDone, Payload: []byte(`{}`)})
	q.close(io.ErrUnexpectedEOF)
	q.push(wire.Msg{Kind: wire.KindPing}) // after the end: dropped
	var got []wire.Kind
	for {
		m, err := q.recv()
		if err != nil {
			if err != io.ErrUnexpectedEOF {
				t.Fatalf("recv's end: %v", err)
			}
			break
		}
		got = append(got, m.Kind)
	}
	if want := []wire.Kind{wire.KindPing, wire.KindDone}; !slices.Equal(got, want) {
		t.Errorf("received %v, want %v", got, want)
	}
	if q.msgs != nil || q.bytes != 0 {
		t.Errorf("drained queue holds %d messages, %d bytes", len(q.msgs), q.bytes)
	}
}

// TestInQueueNotify: Notify's function hears of messages already waiting,
// of each push and of the end; poll takes what waits without waiting, and
// says nothing waits, then the end once drained.
func TestInQueueNotify(t *testing.T) {
	var q inQueue
	q.init()
	q.push(wire.Msg{Kind: wire.KindPing})
	calls := 0
	q.notify(func() { calls++ })
	if calls != 1 {
		t.Fatalf("notify with a message waiting: %d calls, want 1", calls)
	}
	if m, ok, err := q.poll(); !ok || err != nil || m.Kind != wire.KindPing {
		t.Fatalf("poll: %v %v %v", m.Kind, ok, err)
	}
	if _, ok, err := q.poll(); ok || err != nil {
		t.Fatalf("poll of an empty queue: %v %v", ok, err)
	}
	q.push(wire.Msg{Kind: wire.KindDone})
	q.close(io.EOF)
	if calls != 3 {
		t.Fatalf("after a push and the end: %d calls, want 3", calls)
	}
	if m, ok, err := q.poll(); !ok || err != nil || m.Kind != wire.KindDone {
		t.Fatalf("poll before the end: %v %v %v", m.Kind, ok, err)
	}
	if _, ok, err := q.poll(); ok || err != io.EOF {
		t.Fatalf("poll after the end: %v %v, want io.EOF", ok, err)
	}
}

// TestLinkedWakes: a relay's answer to a link sent ahead of the host's
// dial wakes whoever waits for it (Prelink's ready) once the answer is
// in the channel the dial takes it from; the loss of the relay does the
// same with the relay named.
func TestLinkedWakes(t *testing.T) {
	root, _, _, _ := testTree(t)
	tr := root.n.t
	tr.nodes = append(tr.nodes, &node{t: tr, i: 3, h: hostfile.Host{Name: "d"}, up: make(chan struct{})})
	// d is not a's child in this chain: a's answer for it is refused, and
	// still wakes its waiter.
	woke := make(chan linkAnswer, 1)
	var w waiter
	w = waiter{ch: make(chan linkAnswer, 1), then: func() { woke <- <-w.ch }}
	root.expect(3, w)
	root.linked(wire.Linked{Host: 3})
	if a := <-woke; a.err == nil || !errors.Is(a.err, ErrPermanent) {
		t.Errorf("answer for a host that is not the relay's child: %+v, want a permanent error", a)
	}
	w = waiter{ch: make(chan linkAnswer, 1), then: func() { woke <- <-w.ch }}
	root.expect(1, w)
	root.fail(io.EOF)
	var cut *CutOffError
	if a := <-woke; !errors.As(a.err, &cut) || cut.Relay != "a" || !errors.Is(a.err, ErrUnreachable) {
		t.Errorf("answer once the relay is lost: %v, want unreachable, cut off by a", a.err)
	}
	// Registered after the loss: answered at once.
	w = waiter{ch: make(chan linkAnswer, 1), then: func() { woke <- <-w.ch }}
	root.expect(2, w)
	if a := <-woke; !errors.As(a.err, &cut) {
		t.Errorf("answer registered after the loss: %v, want cut off", a.err)
	}
}

// TestPrelinkFire: ready runs once, on the first of the answer, the
// launch's end and the timer, and never after the others.
func TestPrelinkFire(t *testing.T) {
	for _, first := range []string{"answer", "ctx", "timer", "before arm"} {
		t.Run(first, func(t *testing.T) {
			var n atomic.Int32
			done := make(chan struct{}, 4)
			f := &prelinkFire{ready: func() { n.Add(1); done <- struct{}{} }}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			d := time.Hour
			if first == "timer" {
				d = time.Millisecond
			}
			if first == "before arm" {
				f.fire()
			}
			f.arm(ctx, d)
			switch first {
			case "answer":
				f.fire()
			case "ctx":
				cancel()
			}
			<-done
			f.fire()
			cancel()
			time.Sleep(20 * time.Millisecond) // time for a second call, if any
			if got := n.Load(); got != 1 {
				t.Errorf("ready ran %d times, want 1", got)
			}
		})
	}
}

// fromRelayB is what the engine reads on relay b's stream (b behind a,
// c behind b: testTree, every link up) once b's agent sent v of kind k.
func fromRelayB(t *testing.T, k wire.Kind, v any) (wire.Msg, error) {
	t.Helper()
	root, mid, leaf, agent := testTree(t)
	for _, l := range []*link{root, mid, leaf} {
		l.n.setUp(l) // as the dials do
	}
	e, err := wire.Encode(k, v)
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.SendEnvelope(wire.KindRelayed, 1, k, e.Payload()); err != nil {
		t.Fatal(err)
	}
	return wire.NewConn(mid).Recv()
}

// TestLinkFences: a relay's combined fence reaches the engine whole, its
// puts untouched, its hosts named as hosts, as spans or both; one that
// names a host not behind the relay that sent it, or a span past the
// launch, is a protocol violation that ends that relay's stream, naming
// it.
func TestLinkFences(t *testing.T) {
	// b (behind a) sends its subtree's fence: b and c.
	for _, tc := range []struct {
		name string
		f    wire.Fences
		err  string
	}{
		{"hosts", wire.Fences{Seq: 1, Hosts: []int{1, 2}, Puts: map[string]string{"rank-1": "card-1", "rank-2": "card-2"}}, ""},
		{"spans", wire.Fences{Seq: 1, Spans: [][2]int{{1, 2}}, Puts: map[string]string{"rank-2": "card-2"}}, ""},
		{"both", wire.Fences{Seq: 1, Hosts: []int{2}, Spans: [][2]int{{1, 1}}, Puts: map[string]string{"rank-2": "card-2"}}, ""},
		{"its relay", wire.Fences{Seq: 2, Hosts: []int{0, 1}}, "protocol violation of relay b: a fence for host 0, which is not behind it"},
		{"its relay in a span", wire.Fences{Seq: 2, Spans: [][2]int{{0, 2}}}, "protocol violation of relay b: a fence for host 0, which is not behind it"},
		{"a span past the launch", wire.Fences{Seq: 2, Spans: [][2]int{{1, 1 << 40}}}, "protocol violation of relay b: fences: span 0 [1, 1099511627776] is not within [0, 2] in order"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := fromRelayB(t, wire.KindFences, tc.f)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("b's stream got %s, %v; want %q", m.Kind, err, tc.err)
				}
				return
			}
			if err != nil || m.Kind != wire.KindFences {
				t.Fatalf("b's stream got %s, %v; want its fences", m.Kind, err)
			}
			var got wire.Fences
			if err := m.Decode(&got); err != nil || !reflect.DeepEqual(got, tc.f) {
				t.Fatalf("b's fences reached the engine as %+v (%v), want %+v", got, err, tc.f)
			}
		})
	}
}

// TestLinkEnds: a relay's ends reach the engine on its stream; a host it
// names that is not behind it (its relay itself, or one unlinked since:
// the launcher gave up on it) is dropped and the rest stand; spans past
// the launch, or a frame that does not decode, end the relay's stream
// as its protocol violation.
func TestLinkEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    wire.Ends
		want []int // the hosts the engine gets
		err  string
	}{
		{"hosts", wire.Ends{Self: true, Hosts: []int{2}, Last: true}, []int{2}, ""},
		{"spans", wire.Ends{Spans: [][2]int{{2, 2}}}, []int{2}, ""},
		{"its relay too", wire.Ends{Hosts: []int{0, 1, 2}}, []int{2}, ""},
		{"none left", wire.Ends{Done: true, Spans: [][2]int{{0, 1}}}, nil, ""},
		{"a span past the launch", wire.Ends{Spans: [][2]int{{1, 1 << 20}}}, nil, "protocol violation of relay b: fences: span 0 [1, 1048576] is not within [0, 2] in order"},
		{"out of order", wire.Ends{Hosts: []int{2, 2}}, nil, "relay b: wire: ends: host 2 out of order"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := fromRelayB(t, wire.KindEnds, tc.e)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("b's stream got %s, %v; want %q", m.Kind, err, tc.err)
				}
				return
			}
			if err != nil || m.Kind != wire.KindEnds {
				t.Fatalf("b's stream got %s, %v; want its ends", m.Kind, err)
			}
			got, err := m.Ends()
			var hosts []int
			got.Each(func(h int) bool { hosts = append(hosts, h); return true })
			if err != nil || !slices.Equal(hosts, tc.want) || got.Self != tc.e.Self || got.Done != tc.e.Done || got.Last != tc.e.Last {
				t.Fatalf("b's ends reached the engine as %+v, hosts %v (%v); want hosts %v of %+v", got, hosts, err, tc.want, tc.e)
			}
		})
	}
}

// TestLinkGathered: a relay's gathered answers reach the engine whole on
// the relay's stream (the engine decodes them); answers for a host not
// behind it are a protocol violation that ends that relay's stream,
// naming it.
func TestLinkGathered(t *testing.T) {
	root, mid, leaf, agent := testTree(t)
	for _, l := range []*link{root, mid, leaf} {
		l.n.setUp(l)
	}
	g, _ := wire.Encode(wire.KindGathered, wire.Gathered{Kind: wire.KindReady, Hosts: []int{1, 2}, Answers: []json.RawMessage{[]byte(`{}`), []byte(`{"err":"x"}`)}})
	if err := agent.SendEnvelope(wire.KindRelayed, 1, wire.KindGathered, g.Payload()); err != nil {
		t.Fatal(err)
	}
	m, err := wire.NewConn(mid).Recv()
	if err != nil || m.Kind != wire.KindGathered {
		t.Fatalf("b's stream got %s, %v; want its gathered answers", m.Kind, err)
	}
	if got, err := m.Gathered(); err != nil || len(got.Hosts) != 2 || string(got.Answers[1]) != `{"err":"x"}` {
		t.Fatalf("b's answers reached the engine as %+v (%v)", got, err)
	}
	bad, _ := wire.Encode(wire.KindGathered, wire.Gathered{Kind: wire.KindReady, Hosts: []int{0}, Answers: []json.RawMessage{[]byte(`{}`)}})
	if err := agent.SendEnvelope(wire.KindRelayed, 1, wire.KindGathered, bad.Payload()); err != nil {
		t.Fatal(err)
	}
	_, err = wire.NewConn(mid).Recv()
	if err == nil || !strings.Contains(err.Error(), "protocol violation of relay b: a ready answer for host 0, which is not behind it") {
		t.Fatalf("b's stream ended with %v, want b's protocol violation", err)
	}
}

// TestTreeSpreadAndHolds: a spread goes once to each link the launcher
// holds itself (a first-level relay, and a host of the tree it dialed
// directly because its relay failed), to none behind them, and to none
// that is down; a first-level link holds the hosts linked behind it,
// not one the launcher holds itself, and none once it is down. Both are
// read from what the links record as they come and go (the launch's
// barriers and spreads walk no host), so each case moves a link.
func TestTreeSpreadAndHolds(t *testing.T) {
	root, mid, leaf, agent := testTree(t)
	tr := root.n.t
	for _, l := range []*link{root, mid, leaf} {
		l.n.setUp(l)
	}
	for i, want := range []bool{true, true, true} {
		if root.holds(i) != want {
			t.Errorf("a holds host %d: %v, want %v", i, !want, want)
		}
	}
	if mid.holds(0) || !mid.holds(2) {
		t.Errorf("b holds a: %v, c: %v; want false, true", mid.holds(0), mid.holds(2))
	}

	// c's relay is lost for good: the launcher dials c itself.
	near, far := net.Pipe()
	direct := newLink(tr.nodes[2], nil)
	direct.raw = wire.NewConn(near)
	direct.readers.Go(direct.readRaw)
	t.Cleanup(func() { far.Close(); direct.Close() })
	tr.nodes[2].setUp(direct)
	if root.holds(2) || mid.holds(2) || !direct.holds(2) {
		t.Errorf("c dialed directly: held by a %v, b %v, itself %v; want false, false, true", root.holds(2), mid.holds(2), direct.holds(2))
	}

	spread := func(want ...*wire.Conn) {
		t.Helper()
		done := make(chan struct{})
		go func() { defer close(done); tr.Spread(wire.KindPing, nil) }()
		for _, c := range want {
			if m, err := c.Recv(); err != nil || m.Kind != wire.KindSpread {
				t.Fatalf("got %s, %v; want a spread", m.Kind, err)
			}
		}
		// The pipes take no write unread: a spread to any other link
		// would never return.
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the spread wrote to a link it should not have")
		}
	}
	spread(agent, wire.NewConn(far))

	// c is reached through b again (a later attempt): its own link is
	// no longer spread to.
	again := newLink(tr.nodes[2], mid)
	tr.nodes[2].setUp(again)
	if !root.holds(2) || direct.holds(2) {
		t.Errorf("c linked behind b again: held by a %v, its old link %v; want true, false", root.holds(2), direct.holds(2))
	}
	spread(agent)

	tr.nodes[1].setDown(mid)
	if root.holds(1) {
		t.Error("a still holds b after b's link went down")
	}
	tr.nodes[2].setDown(again)
	tr.nodes[0].setDown(root)
	if root.holds(0) || root.holds(2) {
		t.Error("a still holds itself or c after their links went down")
	}
	spread()
}

// countWriter records each Write.
type countWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
}

func (w *countWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	return w.buf.Write(p)
}

func (w *countWriter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes
}

// TestTreeHold: frames for the hosts behind a first-level link, sent
// while the tree holds (the starts), leave in one write at the release,
// in the order sent.
func TestTreeHold(t *testing.T) {
	hosts := []hostfile.Host{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	tr := newTestTree(hosts, 1, nil)
	var w countWriter
	root := newLink(tr.nodes[0], nil)
	root.raw = wire.NewConn(pipeConn{bytes.NewReader(nil), &w})
	mid := newLink(tr.nodes[1], root)
	leaf := newLink(tr.nodes[2], mid)
	for _, l := range []*link{root, mid, leaf} {
		l.n.setUp(l)
	}
	send := func(hold func() func() error, n int) {
		t.Helper()
		release := hold()
		for i := range n {
			for _, l := range []*link{mid, leaf} {
				if err := wire.NewConn(l).Send(wire.KindStart, wire.StartJob{JobID: fmt.Sprint(i)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if got := w.count(); got != 0 {
			t.Fatalf("%d writes while held", got)
		}
		if err := release(); err != nil {
			t.Fatal(err)
		}
		if got := w.count(); got != 1 {
			t.Fatalf("%d writes at the release, want 1", got)
		}
		r := wire.NewConn(pipeConn{&w.buf, io.Discard})
		for i := range n {
			for _, depth := range []int{1, 2} {
				m, err := r.Recv()
				if err != nil {
					t.Fatal(err)
				}
				for range depth {
					if _, m, err = m.Envelope(); err != nil {
						t.Fatal(err)
					}
				}
				var sj wire.StartJob
				if err := m.Decode(&sj); err != nil || m.Kind != wire.KindStart || sj.JobID != fmt.Sprint(i) {
					t.Fatalf("frame %d at depth %d: %s %+v %v", i, depth, m.Kind, sj, err)
				}
			}
		}
		w.writes = 0
	}
	send(tr.Hold, 32)
}

// childBase is a treeBase whose children are reached at their names.
type childBase struct{ treeBase }

func (childBase) child(_ context.Context, h hostfile.Host) (childTarget, error) {
	return childTarget{Addr: h.Name + ":22122", User: "u"}, nil
}

// TestTreePrelinkTogether: the links for a relay's children leave in one
// write, in order, each child's ready runs once (here when the launch
// ends, no answer coming), and a host with no relay, or one the tree
// does not know, is ready at once.
func TestTreePrelinkTogether(t *testing.T) {
	const width, n = 4, 12 // hosts 0-3 first level; 4-7 behind 0
	hosts := make([]hostfile.Host, n)
	for i := range hosts {
		hosts[i] = hostfile.Host{Name: fmt.Sprintf("h%d", i)}
	}
	tr := newTestTree(hosts, width, childBase{})
	var w countWriter
	relay := newLink(tr.nodes[0], nil)
	relay.raw = wire.NewConn(pipeConn{bytes.NewReader(nil), &w})
	relay.keyUser = "u" // its certificate for u is out already
	relay.n.setUp(relay)
	close(relay.facts)

	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	readied := map[string]int{}
	prelink := func(hs ...hostfile.Host) {
		tr.Prelink(ctx, hs, func(k int) {
			mu.Lock()
			readied[hs[k].Name]++
			mu.Unlock()
		})
	}
	prelink(hosts[1], hostfile.Host{Name: "elsewhere"})
	mu.Lock()
	if readied["h1"] != 1 || readied["elsewhere"] != 1 {
		t.Errorf("hosts with nothing to start ready %v, want once each at once", readied)
	}
	mu.Unlock()
	prelink(hosts[4:8]...)
	if got := w.count(); got != 1 {
		t.Errorf("%d writes for a relay's four children, want 1", got)
	}
	r := wire.NewConn(pipeConn{&w.buf, io.Discard})
	for i := 4; i < 8; i++ {
		m, err := r.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var l wire.Link
		if err := m.Decode(&l); err != nil || m.Kind != wire.KindLink || l.Host != i || l.Addr != hosts[i].Name+":22122" {
			t.Fatalf("frame for h%d: %s %+v %v", i, m.Kind, l, err)
		}
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		got := maps.Clone(readied)
		mu.Unlock()
		if len(got) == 6 || time.Now().After(deadline) {
			for i := 4; i < 8; i++ {
				if got[hosts[i].Name] != 1 {
					t.Errorf("%s ready %d times once the launch ended, want 1", hosts[i].Name, got[hosts[i].Name])
				}
			}
			break
		}
		time.Sleep(time.Millisecond)
	}
}

// downBase is a treeBase whose Dial fails as why says for a host (a
// wire.Dial* reason, or any other text for an error of its own), else
// opens a pipe.
type downBase struct {
	childBase
	why    map[string]string
	mu     sync.Mutex
	dialed []string
	ends   []net.Conn
}

func (b *downBase) Dial(_ context.Context, h hostfile.Host) (io.ReadWriteCloser, string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dialed = append(b.dialed, h.Name)
	addr := h.Name + ":22122"
	switch why := b.why[h.Name]; why {
	case "":
		near, far := net.Pipe()
		b.ends = append(b.ends, far)
		return near, addr, nil
	case wire.DialRefused, wire.DialNoRoute, wire.DialTimeout, wire.DialDNS:
		return nil, "", dialError(addr, why, h.Name, errors.New(why))
	default:
		return nil, "", fmt.Errorf("%s: %s", addr, why)
	}
}

func (b *downBase) wasDialed(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Contains(b.dialed, name)
}

// treeDialer is a tree of width over hosts on base, going around relays
// that are down when around says so and waiting wait for a relay, and a
// dial of one of its hosts by name; what the dials open, and base's far
// ends, are closed when the test ends.
func treeDialer(t *testing.T, hosts []hostfile.Host, width int, base *downBase, around bool, wait time.Duration) (*Tree, func(name string) (io.ReadWriteCloser, error)) {
	t.Helper()
	tr := newTestTree(hosts, width, base)
	tr.SetGoAround(around)
	tr.relayWait = wait
	var links []io.Closer
	t.Cleanup(func() {
		for _, l := range links {
			l.Close()
		}
		for _, c := range base.ends {
			c.Close()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return tr, func(name string) (io.ReadWriteCloser, error) {
		i, ok := tr.index[nodeKey{name, 0}]
		if !ok {
			t.Fatalf("no host %s in the tree", name)
		}
		rwc, _, err := tr.Dial(ctx, hosts[i])
		if err == nil {
			links = append(links, rwc)
		}
		return rwc, err
	}
}

// TestTreeGoesAround: with SetGoAround on, a host whose relay is down
// (nothing listening there, or nothing answering) is reached directly
// once it has waited for the relay; a host whose relay failed otherwise
// (a slow login), or whose relay is only waiting for its own relay,
// waits and is named "its relay R is not connected yet", as every host
// behind a relay that is down is with SetGoAround off.
func TestTreeGoesAround(t *testing.T) {
	// Width 4 over 40 hosts: h0-h3 the first level; h1's children are
	// h8-h11, h2's h12-h15, h3's h16-h19, h8's h36-h39.
	hosts := make([]hostfile.Host, 40)
	for i := range hosts {
		hosts[i] = hostfile.Host{Name: fmt.Sprintf("h%d", i)}
	}
	why := map[string]string{"h1": wire.DialRefused, "h2": wire.DialTimeout, "h3": "ssh handshake failed: timeout"}
	for _, around := range []bool{false, true} {
		t.Run(fmt.Sprintf("around=%v", around), func(t *testing.T) {
			base := &downBase{why: why}
			_, dial := treeDialer(t, hosts, 4, base, around, 20*time.Millisecond)
			for _, r := range []string{"h1", "h2", "h3"} {
				if _, err := dial(r); err == nil {
					t.Fatalf("%s reached; want its dial to fail", r)
				}
			}
			for _, c := range []struct {
				host, relay string
				around      bool // reached directly when around is on
			}{
				{"h8", "h1", true},   // refused
				{"h12", "h2", true},  // nothing answered
				{"h16", "h3", false}, // a slow login: waited for
			} {
				_, err := dial(c.host)
				if around && c.around {
					if err != nil || !base.wasDialed(c.host) {
						t.Errorf("%s behind %s: %v, dialed directly %v; want reached directly", c.host, c.relay, err, base.wasDialed(c.host))
					}
					continue
				}
				want := "its relay " + c.relay + " is not connected yet"
				if err == nil || err.Error() != want || !errors.Is(err, ErrUnreachable) || base.wasDialed(c.host) {
					t.Errorf("%s behind %s: %v (dialed directly %v); want %q, unreachable, not dialed", c.host, c.relay, err, base.wasDialed(c.host), want)
				}
			}
			if !around {
				// h8 is waiting for its relay, which is down: h8 is not
				// down itself, and h36 behind it waits for it.
				_, err := dial("h36")
				if err == nil || err.Error() != "its relay h8 is not connected yet" || errors.Is(err, errRelayDown) || base.wasDialed("h36") {
					t.Errorf("h36 behind h8 (waiting for h1): %v; want it to wait for h8", err)
				}
			}
		})
	}
}

// TestIsDown: what makes a host's relay down, from the host's own
// attempt's error.
func TestIsDown(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"refused", dialError("a:1", wire.DialRefused, "", errors.New("x")), true},
		{"no route", dialError("a:1", wire.DialNoRoute, "", errors.New("x")), true},
		{"lookup failed for now", dialError("a:1", wire.DialDNS, "a", errors.New("x")), true},
		{"no answer", dialError("a:1", wire.DialTimeout, "", errors.New("x")), true},
		{"no such host", dialError("a:1", wire.DialNoSuchHost, "a", errors.New("x")), false},
		{"slow login", errors.New("a:1: ssh handshake failed: timeout"), false},
		{"its relay not up", relayDownError{"r"}, false},
		{"its relay not answering", Unreachable(viaRelay(errors.New("its relay r has not answered yet"))), false},
		{"cut off", Unreachable(&CutOffError{Relay: "r", Err: io.EOF}), false},
		{"none", nil, false},
	} {
		if got := isDown(c.err); got != c.want {
			t.Errorf("%s: isDown(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// TestTreeTriesWhatRelayCannotReach: a host its relay found nothing at
// (refused, no answer) or could not resolve is tried by the launcher
// itself: reached when the launcher can reach it, else failed with the
// launcher's own error, as in a flat launch (a name only the relay
// cannot resolve fails as the launcher's attempt does, not at once as a
// name that does not resolve).
func TestTreeTriesWhatRelayCannotReach(t *testing.T) {
	for _, relayWhy := range []string{wire.DialRefused, wire.DialTimeout, wire.DialNoSuchHost} {
		for _, own := range []string{"", wire.DialRefused} {
			t.Run(relayWhy+"/launcher "+cmp.Or(own, "reaches"), func(t *testing.T) {
				base := &downBase{why: map[string]string{"b": own}}
				hosts := []hostfile.Host{{Name: "a"}, {Name: "b"}}
				tr := newTestTree(hosts, 1, base)
				pl := newLink(tr.nodes[0], nil)
				ch := make(chan linkAnswer, 1)
				ch <- linkAnswer{linked: wire.Linked{Host: 1, Err: "dial tcp: " + relayWhy, Dial: relayWhy, DNSName: "b"}}
				rwc, _, err := tr.awaitLinked(context.Background(), tr.nodes[1], childTarget{Addr: "b:22122", User: "u"}, tr.nodes[0], pl, ch)
				t.Cleanup(func() {
					if rwc != nil {
						rwc.Close()
					}
					for _, c := range base.ends {
						c.Close()
					}
				})
				if !base.wasDialed("b") {
					t.Fatalf("the launcher did not try b itself (err %v)", err)
				}
				switch own {
				case "":
					if err != nil || Relayed(rwc) {
						t.Errorf("b: %v (relayed %v); want reached by the launcher", err, Relayed(rwc))
					}
				default:
					if err == nil || !errors.Is(err, ErrUnreachable) || errors.Is(err, ErrPermanent) || !strings.Contains(err.Error(), "b:22122: connection refused") {
						t.Errorf("b: %v; want the launcher's own refusal, unreachable, not permanent", err)
					}
				}
			})
		}
	}
}

// TestTreeRelayLost: a relay reached (its facts came) and then lost
// during the launch is not waited for by the hosts behind it, since
// nothing will dial it again: with SetGoAround on they are reached
// directly, else they fail at once, unreachable, naming the relay and
// how it was lost. A relay lost before its facts came is being dialed
// again by its own attempts: the hosts behind it wait for it, as before.
func TestTreeRelayLost(t *testing.T) {
	// Width 4 over 12 hosts: h0's children are h4-h7, h1's h8-h11.
	hosts := make([]hostfile.Host, 12)
	for i := range hosts {
		hosts[i] = hostfile.Host{Name: fmt.Sprintf("h%d", i)}
	}
	for _, around := range []bool{false, true} {
		t.Run(fmt.Sprintf("around=%v", around), func(t *testing.T) {
			base := &downBase{}
			tr, dial := treeDialer(t, hosts, 4, base, around, 50*time.Millisecond)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			// h0 answers its Hello with facts, then its agent dies; h1
			// dies before its facts.
			var links []io.ReadWriteCloser
			for _, name := range []string{"h0", "h1"} {
				l, err := dial(name)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				links = append(links, l)
			}
			agent0, agent1 := base.ends[0], base.ends[1]
			if err := wire.NewConn(agent0).Send(wire.KindFacts, wire.Facts{Version: wire.Version, Hostname: "h0"}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-links[0].(*link).facts:
			case <-ctx.Done():
				t.Fatal("h0's facts did not come")
			}
			agent0.Close()
			agent1.Close()
			for _, l := range links {
				select {
				case <-l.(*link).dead:
				case <-ctx.Done():
					t.Fatal("a relay's link outlived its agent")
				}
			}

			_, err := dial("h4") // behind h0, lost after its facts
			switch {
			case around:
				if err != nil || !base.wasDialed("h4") {
					t.Errorf("h4 behind lost h0: %v, dialed directly %v; want reached directly", err, base.wasDialed("h4"))
				}
			default:
				want := "its relay h0 was lost: connection closed"
				if err == nil || err.Error() != want || !errors.Is(err, ErrUnreachable) || base.wasDialed("h4") {
					t.Errorf("h4 behind lost h0: %v (dialed directly %v); want %q, unreachable, not dialed", err, base.wasDialed("h4"), want)
				}
			}
			_, err = dial("h8") // behind h1, lost before its facts: waited for
			if want := "its relay h1 is not connected yet"; err == nil || err.Error() != want || base.wasDialed("h8") {
				t.Errorf("h8 behind h1 (lost before its facts): %v (dialed directly %v); want %q, not dialed", err, base.wasDialed("h8"), want)
			}
			// A relay up again is waited for no more than before: h0
			// dialed again, h5 goes through it.
			if _, err := dial("h0"); err != nil {
				t.Fatalf("h0 again: %v", err)
			}
			if tr.nodes[0].lastErr() != "" {
				t.Errorf("h0 up again still says %q", tr.nodes[0].lastErr())
			}
		})
	}
}
