package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestEnvelopeRoundTrip: what SendEnvelope writes, Recv and Envelope
// give back, nested as a relay of a relay sends it.
func TestEnvelopeRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	c := NewConn(pipeConn{bytes.NewReader(nil), &buf})
	inner := AppendEnvelope(nil, 7, KindOutput, append([]byte{0, 0, 0, 3, byte(Stdout)}, "a line\n"...))
	if err := c.SendEnvelope(KindRelayed, 2, KindRelayed, inner); err != nil {
		t.Fatal(err)
	}
	if err := c.SendEnvelope(KindRelay, 5, KindPing, nil); err != nil {
		t.Fatal(err)
	}
	r := NewConn(pipeConn{&buf, io.Discard})
	m, err := r.Recv()
	if err != nil {
		t.Fatal(err)
	}
	host, in, err := m.Envelope()
	if err != nil || host != 2 || in.Kind != KindRelayed {
		t.Fatalf("outer: host %d kind %s err %v", host, in.Kind, err)
	}
	host, in, err = in.Envelope()
	if err != nil || host != 7 || in.Kind != KindOutput {
		t.Fatalf("inner: host %d kind %s err %v", host, in.Kind, err)
	}
	rank, s, data, err := in.Output()
	if err != nil || rank != 3 || s != Stdout || string(data) != "a line\n" {
		t.Fatalf("output: %d %s %q %v", rank, s, data, err)
	}
	m, err = r.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if host, in, err = m.Envelope(); err != nil || host != 5 || in.Kind != KindPing || len(in.Payload) != 0 {
		t.Fatalf("ping: host %d kind %s err %v", host, in.Kind, err)
	}
}

func TestEnvelopeMalformed(t *testing.T) {
	env := func(host uint32, k Kind, n uint32, body int) []byte {
		b := binary.BigEndian.AppendUint32(nil, host)
		b = append(b, byte(k))
		b = binary.BigEndian.AppendUint32(b, n)
		return append(b, make([]byte, body)...)
	}
	cases := []struct {
		name string
		msg  Msg
		want string
	}{
		{"not an envelope", Msg{Kind: KindOutput, Payload: env(1, KindPing, 0, 0)}, "not an envelope"},
		{"short", Msg{Kind: KindRelay, Payload: []byte{0, 0, 0, 1, 1}}, "malformed"},
		{"length over", Msg{Kind: KindRelay, Payload: env(1, KindExit, 10, 4)}, "says 10 bytes, 4 follow"},
		{"length under", Msg{Kind: KindRelayed, Payload: env(1, KindExit, 2, 4)}, "says 2 bytes, 4 follow"},
		{"unknown inner kind", Msg{Kind: KindRelayed, Payload: env(1, 250, 0, 0)}, "unknown frame kind"},
		{"inner over its limit", Msg{Kind: KindRelayed, Payload: env(1, KindPing, MaxControl+1, MaxControl+1)}, "too large"},
		{"host out of range", Msg{Kind: KindRelay, Payload: env(1<<31, KindPing, 0, 0)}, "out of range"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := c.msg.Envelope()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
}

func TestSendEnvelopeRefuses(t *testing.T) {
	c := NewConn(pipeConn{bytes.NewReader(nil), io.Discard})
	if err := c.SendEnvelope(KindOutput, 1, KindPing, nil); err == nil {
		t.Error("an output frame sent as an envelope")
	}
	var fe *FrameError
	if err := c.SendEnvelope(KindRelay, 1, KindPing, make([]byte, MaxControl+1)); !errors.As(err, &fe) {
		t.Errorf("a ping over its limit inside an envelope: %v", err)
	}
}

func TestLinkValidate(t *testing.T) {
	ok := Link{Host: 3, Name: "gpu03", Addr: "198.18.0.3:22122", User: "alice", TimeoutMS: 20000}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	// A host's ssh configuration may allow minutes of silence
	// (ServerAliveInterval 60, ServerAliveCountMax 3: 180 s).
	slow := ok
	slow.KeepaliveMS, slow.KeepaliveTimeoutMS = 60000, 180000
	if err := slow.Validate(); err != nil {
		t.Errorf("keepalive 60 s / 180 s: %v", err)
	}
	bad := map[string]func(*Link){
		"negative host":      func(l *Link) { l.Host = -1 },
		"no port":            func(l *Link) { l.Addr = "198.18.0.3" },
		"port zero":          func(l *Link) { l.Addr = "h:0" },
		"port text":          func(l *Link) { l.Addr = "h:ssh" },
		"empty host":         func(l *Link) { l.Addr = ":22" },
		"no user":            func(l *Link) { l.User = "" },
		"long name":          func(l *Link) { l.Name = strings.Repeat("x", MaxNameLen+1) },
		"no timeout":         func(l *Link) { l.TimeoutMS = 0 },
		"long timeout":       func(l *Link) { l.TimeoutMS = MaxLinkTimeout + 1 },
		"long silence":       func(l *Link) { l.KeepaliveTimeoutMS = MaxKeepalive + 1 },
		"negative keepalive": func(l *Link) { l.KeepaliveMS = -1 },
	}
	for name, f := range bad {
		l := ok
		f(&l)
		if err := l.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzEnvelope: opening any bytes as an envelope never panics, and what
// opens is a frame within its kind's limit that re-wraps to the same
// bytes.
func FuzzEnvelope(f *testing.F) {
	f.Add(AppendEnvelope(nil, 3, KindOutput, []byte{0, 0, 0, 1, 1, 'x', '\n'}))
	f.Add(AppendEnvelope(nil, 1, KindRelayed, AppendEnvelope(nil, 9, KindPing, nil)))
	f.Add([]byte{0, 0, 0, 1, byte(KindExit), 0, 0, 0, 9, '{'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 250, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		for depth := 0; depth < MaxTreeDepth+2; depth++ {
			m := Msg{Kind: KindRelayed, Payload: in}
			host, inner, err := m.Envelope()
			if err != nil {
				return
			}
			if lim := Limit(inner.Kind); lim == 0 || len(inner.Payload) > lim {
				t.Fatalf("opened %s of %d bytes (limit %d)", inner.Kind, len(inner.Payload), lim)
			}
			if back := AppendEnvelope(nil, host, inner.Kind, inner.Payload); !bytes.Equal(back, in) {
				t.Fatalf("re-wrapped differs")
			}
			if inner.Kind != KindRelayed && inner.Kind != KindRelay {
				return
			}
			in = inner.Payload
		}
	})
}

func TestSpread(t *testing.T) {
	ok := Msg{Kind: KindSpread, Payload: AppendFrame(nil, KindFenceDone, []byte(`{"seq":1}`))}
	in, err := ok.Spread()
	if err != nil || in.Kind != KindFenceDone || string(in.Payload) != `{"seq":1}` {
		t.Fatalf("spread: %s %q %v", in.Kind, in.Payload, err)
	}
	bad := map[string]Msg{
		"not a spread":      {Kind: KindRelay, Payload: ok.Payload},
		"short":             {Kind: KindSpread, Payload: []byte{byte(KindGo), 0}},
		"length differs":    {Kind: KindSpread, Payload: append(AppendFrame(nil, KindGo, nil), 'x')},
		"start is per host": {Kind: KindSpread, Payload: AppendFrame(nil, KindStart, []byte("{}"))},
		"envelope inside":   {Kind: KindSpread, Payload: AppendFrame(nil, KindRelay, AppendEnvelope(nil, 1, KindGo, nil))},
		"unknown kind":      {Kind: KindSpread, Payload: AppendFrame(nil, 250, nil)},
		"over its limit":    {Kind: KindSpread, Payload: AppendFrame(nil, KindPing, make([]byte, MaxControl+1))},
	}
	for name, m := range bad {
		if _, err := m.Spread(); err == nil {
			t.Errorf("%s: opened", name)
		}
	}
}

// FuzzSpread: opening any bytes as a spread frame never panics, and what
// opens is a spreadable frame within its limit.
func FuzzSpread(f *testing.F) {
	f.Add(AppendFrame(nil, KindFenceDone, []byte(`{"seq":2,"puts":{"a":"b"}}`)))
	f.Add(AppendFrame(nil, KindGo, nil))
	f.Add([]byte{byte(KindStart), 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := Msg{Kind: KindSpread, Payload: in}.Spread()
		if err != nil {
			return
		}
		if !Spreadable(m.Kind) || len(m.Payload) > Limit(m.Kind) {
			t.Fatalf("opened %s of %d bytes", m.Kind, len(m.Payload))
		}
	})
}

// TestStallBound: a write may stall for the floor, or past the most the
// keepalives take to find the host silent, so that a host behind a dead
// link is cut as silent, not as a stalled reader.
func TestStallBound(t *testing.T) {
	const floor = 10 * time.Second
	for _, tc := range []struct{ interval, silence, want time.Duration }{
		{time.Second, 2 * time.Second, floor},
		{5 * time.Second, 15 * time.Second, 25 * time.Second},
		{10 * time.Second, 90 * time.Second, 110 * time.Second},
	} {
		got := StallBound(floor, tc.interval, tc.silence)
		if got != tc.want {
			t.Errorf("StallBound(%v, %v, %v) = %v, want %v", floor, tc.interval, tc.silence, got, tc.want)
		}
		if worst := tc.interval + tc.silence; got <= worst {
			t.Errorf("StallBound(%v, %v, %v) = %v, not past the keepalives' worst case %v", floor, tc.interval, tc.silence, got, worst)
		}
	}
}

func TestMsgGathered(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kind    Kind
		payload string
		hosts   []int
		err     string
	}{
		{"ready", KindGathered, `{"kind":4,"hosts":[3,7],"answers":[{},{"err":"x"}]}`, []int{3, 7}, ""},
		{"probe results", KindGathered, `{"kind":20,"hosts":[0],"answers":[{"results":[]}]}`, []int{0}, ""},
		{"a kind not gathered", KindGathered, `{"kind":9,"hosts":[1],"answers":[{}]}`, nil, "not gathered"},
		{"fewer answers", KindGathered, `{"kind":4,"hosts":[1,2],"answers":[{}]}`, nil, "2 hosts and 1 answers"},
		{"none", KindGathered, `{"kind":4,"hosts":[],"answers":[]}`, nil, "0 hosts"},
		{"a host twice", KindGathered, `{"kind":4,"hosts":[2,2],"answers":[{},{}]}`, nil, "twice"},
		{"a negative host", KindGathered, `{"kind":4,"hosts":[-1],"answers":[{}]}`, nil, "below 0"},
		{"a null answer", KindGathered, `{"kind":4,"hosts":[1],"answers":[null]}`, nil, "not a JSON object"},
		{"a number for an answer", KindGathered, `{"kind":4,"hosts":[1],"answers":[ 5 ]}`, nil, "not a JSON object"},
		{"not JSON", KindGathered, `{"kind":`, nil, "wire: decode gathered"},
		{"another frame", KindFences, `{"kind":4,"hosts":[1],"answers":[{}]}`, nil, "not gathered answers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Msg{Kind: tc.kind, Payload: []byte(tc.payload)}.Gathered()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(g.Hosts, tc.hosts) {
				t.Fatalf("hosts %v, err %v; want %v", g.Hosts, err, tc.hosts)
			}
		})
	}
}

// TestFencesSpans: Compact turns a subtree's hosts into runs, CheckSpans
// takes only runs within the launch, ascending and apart, and Each walks
// Hosts then Spans.
func TestFencesSpans(t *testing.T) {
	for _, tc := range []struct {
		hosts []int
		spans [][2]int
	}{
		{nil, nil},
		{[]int{7}, [][2]int{{7, 7}}},
		{[]int{3, 1, 2, 2, 9, 10, 0}, [][2]int{{0, 3}, {9, 10}}},
		// A first-level relay of 10,000 hosts at width 32: itself, its
		// 32 children, their 1,024 children's share.
		{append(append([]int{5}, seq(192, 223)...), seq(6176, 7199)...), [][2]int{{5, 5}, {192, 223}, {6176, 7199}}},
	} {
		f := Fences{Seq: 3, Hosts: tc.hosts}
		f.Compact()
		if f.Hosts != nil || !reflect.DeepEqual(f.Spans, tc.spans) {
			t.Errorf("Compact(%v): hosts %v spans %v, want spans %v", tc.hosts, f.Hosts, f.Spans, tc.spans)
		}
		if err := f.CheckSpans(10000); err != nil {
			t.Errorf("Compact(%v) fails its own check: %v", tc.hosts, err)
		}
		var got []int
		f.Each(func(h int) bool { got = append(got, h); return true })
		want := slices.Compact(slices.Sorted(slices.Values(tc.hosts)))
		if f.Count() != len(want) {
			t.Errorf("Count after Compact(%v) = %d, want %d", tc.hosts, f.Count(), len(want))
		}
		if !slices.Equal(got, want) {
			t.Errorf("Each after Compact(%v) = %v, want %v", tc.hosts, got, want)
		}
	}
	for _, tc := range []struct {
		spans [][2]int
		err   string
	}{
		{[][2]int{{0, 0}, {2, 4}}, ""},
		{[][2]int{{-1, 2}}, "span 0 [-1, 2] is not within [0, 9] in order"},
		{[][2]int{{3, 2}}, "span 0 [3, 2]"},
		{[][2]int{{0, 10}}, "span 0 [0, 10] is not within [0, 9]"},
		{[][2]int{{4, 5}, {6, 7}}, "span 1 [6, 7] is not within [7, 9]"},
		{[][2]int{{4, 5}, {1, 2}}, "span 1 [1, 2]"},
		{[][2]int{{4, 5}, {5, 6}}, "span 1 [5, 6]"},
		{[][2]int{{0, math.MaxInt}}, "span 0"},
	} {
		err := Fences{Spans: tc.spans}.CheckSpans(10)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("CheckSpans(%v, 10) = %v, want %q", tc.spans, err, tc.err)
		}
	}
	n := 0
	Fences{Hosts: []int{1, 2}, Spans: [][2]int{{5, 9}}}.Each(func(h int) bool { n++; return h != 6 })
	if n != 4 {
		t.Errorf("Each did not stop at the first false: %d calls, want 4", n)
	}
}

func seq(lo, hi int) []int {
	var s []int
	for i := lo; i <= hi; i++ {
		s = append(s, i)
	}
	return s
}

// FuzzFences: whatever a relay sends as Fences, spans that pass
// CheckSpans name at most the launch's hosts, in ascending order and
// once each; and Compact of any hosts passes it and names them back.
func FuzzFences(f *testing.F) {
	f.Add([]byte(`{"seq":1,"hosts":[3,1],"spans":[[5,9],[20,20]]}`), 32)
	f.Add([]byte(`{"seq":2,"hosts":[],"spans":[[0,9223372036854775807]]}`), 100)
	f.Add([]byte(`{"seq":2,"hosts":[4,4,-1,7],"spans":[[2,1]]}`), 8)
	f.Fuzz(func(t *testing.T, data []byte, n int) {
		n = n%5000 + 5000 // launches of 1 to 9,999 hosts
		var fs Fences
		if json.Unmarshal(data, &fs) != nil {
			return
		}
		if fs.CheckSpans(n) == nil {
			last, count := -1, 0
			Fences{Spans: fs.Spans}.Each(func(h int) bool {
				if h <= last || h >= n {
					t.Fatalf("spans %v passed the check for %d hosts but name %d after %d", fs.Spans, n, h, last)
				}
				last, count = h, count+1
				return true
			})
			if count > n {
				t.Fatalf("spans %v name %d hosts of %d", fs.Spans, count, n)
			}
		}
		var hosts []int
		for _, h := range fs.Hosts {
			if h >= 0 && h < n {
				hosts = append(hosts, h)
			}
		}
		c := Fences{Hosts: hosts}
		c.Compact()
		if err := c.CheckSpans(n); err != nil {
			t.Fatalf("Compact(%v) = %v fails the check: %v", hosts, c.Spans, err)
		}
		var back []int
		c.Each(func(h int) bool { back = append(back, h); return true })
		if want := slices.Compact(slices.Sorted(slices.Values(hosts))); !slices.Equal(back, want) {
			t.Fatalf("Compact(%v) names %v", hosts, back)
		}
	})
}

// TestHandshakeWhy: a failed login's reason without x/crypto/ssh's
// prefixes; a connection the other end closed mid-login (its end, a
// reset, a broken pipe, or this end's socket closed after a failed
// write) says so and names what closes logins at an agent.
func TestHandshakeWhy(t *testing.T) {
	closed := "the agent closed the connection during the login ("
	for _, tc := range []struct {
		err  error
		want string // the whole reason, or its start for a closed one
	}{
		{fmt.Errorf("ssh: handshake failed: %w", io.EOF), closed + "EOF)"},
		{fmt.Errorf("ssh: handshake failed: %w", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), closed + "read tcp: read: connection reset by peer)"},
		{fmt.Errorf("ssh: handshake failed: %w", &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}), closed + "write tcp: write: broken pipe)"},
		{fmt.Errorf("ssh: handshake failed: %w", &net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed}), closed + "read tcp: use of closed network connection)"},
		{errors.New("ssh: handshake failed: ssh: unable to authenticate, attempted methods [none publickey], no supported methods remain"), "unable to authenticate, attempted methods [none publickey], no supported methods remain"},
		{fmt.Errorf("ssh: handshake failed: %w", errors.New("host key refused")), "host key refused"},
		{fmt.Errorf("ssh: handshake failed: %w", os.ErrDeadlineExceeded), "i/o timeout"},
	} {
		got := HandshakeWhy(tc.err)
		if strings.HasPrefix(tc.want, closed) {
			if !strings.HasPrefix(got, tc.want) || !strings.Contains(got, "--login-grace-time") {
				t.Errorf("%v: %q, want %q and the agent's bounds", tc.err, got, tc.want)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("%v: %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestMsgEnds: an ends frame decodes with its hosts ascending and once,
// its spans in order and apart, not both self and done.
func TestMsgEnds(t *testing.T) {
	for _, tc := range []struct {
		payload string
		want    Ends
		err     string
	}{
		{`{"self":true,"last":true}`, Ends{Self: true, Last: true}, ""},
		{`{"done":true,"hosts":[3,9,10]}`, Ends{Done: true, Hosts: []int{3, 9, 10}}, ""},
		{`{"spans":[[33,64],[66,70]],"last":true}`, Ends{Spans: [][2]int{{33, 64}, {66, 70}}, Last: true}, ""},
		{`{}`, Ends{}, ""},
		{`{"self":true,"stopped":7,"hosts":[2]}`, Ends{Self: true, Stopped: 7, Hosts: []int{2}}, ""},
		{`{"stopped":-1}`, Ends{}, "-1 ranks stopped"},
		{`{"self":true,"done":true}`, Ends{}, "both self and done"},
		{`{"hosts":[4,4]}`, Ends{}, "host 4 out of order, repeated or below 0"},
		{`{"hosts":[9,3]}`, Ends{}, "host 3 out of order"},
		{`{"hosts":[-1]}`, Ends{}, "host -1 out of order"},
		{`{"spans":[[1,2],[3,4]]}`, Ends{}, "span 1 [3, 4] is not within"},
		{`{"spans":[[5,3]]}`, Ends{}, "span 0 [5, 3]"},
		{`{"hosts":"x"}`, Ends{}, "decode"},
	} {
		e, err := Msg{Kind: KindEnds, Payload: []byte(tc.payload)}.Ends()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %+v, %v; want %q", tc.payload, e, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(e, tc.want) {
			t.Errorf("%s: %+v, %v; want %+v", tc.payload, e, err, tc.want)
		}
	}
	if _, err := (Msg{Kind: KindDone}).Ends(); err == nil {
		t.Error("a done frame decoded as ends")
	}
	if Limit(KindEnds) == 0 || KindEnds.String() != "ends" {
		t.Errorf("ends: limit %d, name %q", Limit(KindEnds), KindEnds)
	}
}
