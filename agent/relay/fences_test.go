package relay

import (
	"bytes"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// nopUp takes what a relay sends up and drops it.
type nopUp struct{}

func (nopUp) Send(wire.Kind, any) error                            { return nil }
func (nopUp) SendEnvelope(wire.Kind, int, wire.Kind, []byte) error { return nil }

// TestSubtreeFences: once its own ranks and every started child have
// entered, a relay's Fences names the subtree's hosts: as spans when the
// launcher takes them (a relay it reaches itself), else as sorted hosts;
// a child's Fences with spans is that child's protocol violation (no
// child of a relay is told to send them).
func TestSubtreeFences(t *testing.T) {
	for _, spans := range []bool{true, false} {
		r := New(t.Context(), nopUp{}, zaptest.NewLogger(t))
		r.self = 4
		r.ownRanks = true
		r.SetFenceSpans(spans)
		r.started = map[int]bool{5: true, 9: true}
		r.barrier = gather{seq: 3, own: true, kids: map[int][]int{9: {9, 11, 10}}}
		if f := r.ready(); f != nil {
			t.Fatalf("spans %v: Fences %+v before child 5 entered", spans, f)
		}
		r.barrier.kids[5] = []int{5, 6, 7, 8}
		f := r.ready()
		want := &wire.Fences{Seq: 3, Spans: [][2]int{{4, 11}}}
		if !spans {
			want = &wire.Fences{Seq: 3, Hosts: []int{4, 5, 6, 7, 8, 9, 10, 11}}
		}
		if !reflect.DeepEqual(f, want) {
			t.Errorf("spans %v: Fences %+v, want %+v", spans, f, want)
		}
		if r.barrier.seq != 4 {
			t.Errorf("spans %v: next barrier %d, want 4", spans, r.barrier.seq)
		}
		r.Close()
	}

	r := New(t.Context(), nopUp{}, zaptest.NewLogger(t))
	defer r.Close()
	r.started = map[int]bool{5: true}
	m, err := wire.Encode(wire.KindFences, wire.Fences{Seq: 1, Spans: [][2]int{{5, 900}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.childFence(&child{host: 5, name: "n5"}, wire.Msg{Kind: wire.KindFences, Payload: m.Payload()}); err == nil || !strings.Contains(err.Error(), "protocol violation of n5: its fences name spans") {
		t.Errorf("a child's spans: %v, want its protocol violation", err)
	}
}

// encodeUp encodes what a relay sends up, as its session would, and
// drops it.
type encodeUp struct{ n int }

func (u *encodeUp) Send(k wire.Kind, v any) error {
	_, err := wire.Encode(k, v)
	u.n++
	return err
}
func (u *encodeUp) SendEnvelope(wire.Kind, int, wire.Kind, []byte) error { return nil }

// BenchmarkRelayFences is a first-level relay's work for one barrier of
// 10,000 hosts through a tree of width 32: its own fence and its 32
// children's Fences (each a relay of about nine hosts below it) decoded,
// merged, and sent up as one Fences, as spans (Hello.FenceSpans) and as
// a list of hosts.
func BenchmarkRelayFences(b *testing.B) {
	const width = 32
	self := 5
	for _, spans := range []bool{false, true} {
		b.Run(map[bool]string{false: "hosts", true: "spans"}[spans], func(b *testing.B) {
			up := &encodeUp{}
			r := New(b.Context(), up, zap.NewNop())
			defer r.Close()
			r.self, r.ownRanks, r.started = self, true, map[int]bool{}
			r.SetFenceSpans(spans)
			var kids []*child
			var msgs []wire.Msg
			for c := (self + 1) * width; c < (self+2)*width; c++ {
				r.started[c] = true
				kids = append(kids, &child{host: c, name: "h" + strconv.Itoa(c)})
				f := wire.Fences{Seq: 1, Hosts: []int{c}}
				for g := (c + 1) * width; g < (c+2)*width && len(f.Hosts) < 9; g++ {
					f.Hosts = append(f.Hosts, g)
				}
				e, err := wire.Encode(wire.KindFences, f)
				if err != nil {
					b.Fatal(err)
				}
				msgs = append(msgs, wire.Msg{Kind: wire.KindFences, Payload: e.Payload()})
			}
			b.ReportAllocs()
			for b.Loop() {
				seq := r.barrier.seq
				if _, err := r.OwnFence(seq, nil); err != nil {
					b.Fatal(err)
				}
				for i, m := range msgs {
					// The children's messages were encoded for barrier 1.
					m.Payload = bytes.Replace(m.Payload, []byte(`"seq":1,`), []byte(`"seq":`+strconv.Itoa(seq)+`,`), 1)
					if _, err := r.childFence(kids[i], m); err != nil {
						b.Fatal(err)
					}
				}
			}
			if up.n != b.N {
				b.Fatalf("%d Fences sent up for %d barriers", up.n, b.N)
			}
		})
	}
}
