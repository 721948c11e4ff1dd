package engine

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
)

// TestCollectGathered: a relay's gathered answers count as each host's
// own, their tree indices turned into the job's; hosts answering alone
// count beside them; a gathered answer for a host not of the job, or a
// gathered frame that does not decode, is the relay's protocol
// violation.
func TestCollectGathered(t *testing.T) {
	j := &job{log: zap.NewNop(), events: make(chan any, 8), quit: make(chan struct{})}
	for tree, idx := range map[int]int{10: 0, 11: 1, 12: 2} {
		j.setTreeIndex(tree, idx)
	}
	for i, name := range []string{"relay", "b", "c"} {
		j.sessions = append(j.sessions, &session{idx: i, host: hostfile.Host{Name: name}})
	}
	gathered := func(hosts []int, answers ...string) wire.Msg {
		g := wire.Gathered{Kind: wire.KindReady, Hosts: hosts}
		for _, a := range answers {
			g.Answers = append(g.Answers, []byte(a))
		}
		e, err := wire.Encode(wire.KindGathered, g)
		if err != nil {
			t.Fatal(err)
		}
		return wire.Msg{Kind: wire.KindGathered, Payload: e.Payload()}
	}
	if !j.control(j.sessions[0], gathered([]int{12, 10}, `{"err":"c failed"}`, `{}`)) {
		t.Fatal("the relay's gathered answers ended its session")
	}
	if !j.control(j.sessions[1], wire.Msg{Kind: wire.KindReady, Payload: []byte(`{}`)}) {
		t.Fatal("b's ready ended its session")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	res, err := j.collect(ctx, wire.KindReady, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`{}`, `{}`, `{"err":"c failed"}`}
	for i, m := range res {
		if m.Kind != wire.KindReady || string(m.Payload) != want[i] {
			t.Errorf("host %d: %s %s, want ready %s", i, m.Kind, m.Payload, want[i])
		}
	}

	if j.control(j.sessions[0], gathered([]int{99}, `{}`)) {
		t.Error("a gathered answer for host 99 (not of the job) was taken")
	}
	if ev, ok := (<-j.events).(evViolation); !ok || ev.host != 0 {
		t.Errorf("event %+v, want the relay's violation", ev)
	}
	// One that does not decode (a host twice) is the relay's violation
	// too, not a message dropped with its subtree's answers.
	if j.control(j.sessions[0], gathered([]int{10, 10}, `{}`, `{}`)) {
		t.Error("gathered answers naming host 10 twice were taken")
	}
	if ev, ok := (<-j.events).(evViolation); !ok || ev.host != 0 || !strings.Contains(ev.what, "twice") {
		t.Errorf("event %+v, want the relay's violation", ev)
	}
}

// TestJobSpans: a relay's fence spans in the tree's indices become the
// job's, runs kept where the job numbers the hosts in the same order
// (as it does), split and put in order where it does not; a host of a
// span that is not the job's is the relay's protocol violation.
func TestJobSpans(t *testing.T) {
	j := &job{log: zap.NewNop(), events: make(chan any, 8), quit: make(chan struct{})}
	// Tree hosts 0-9 are sessions 0-9, except 6 and 7, which swapped.
	for tree := range 10 {
		idx := tree
		switch tree {
		case 6:
			idx = 7
		case 7:
			idx = 6
		}
		j.setTreeIndex(tree, idx)
	}
	j.setTreeIndex(12, 10)
	s := &session{idx: 0, host: hostfile.Host{Name: "relay"}}
	for _, tc := range []struct {
		in, want [][2]int
	}{
		{nil, nil},
		{[][2]int{{0, 5}}, [][2]int{{0, 5}}},
		{[][2]int{{0, 2}, {4, 9}}, [][2]int{{0, 2}, {4, 9}}},
		{[][2]int{{6, 6}}, [][2]int{{7, 7}}},
		{[][2]int{{5, 6}}, [][2]int{{5, 5}, {7, 7}}},
		{[][2]int{{7, 7}, {12, 12}}, [][2]int{{6, 6}, {10, 10}}},
	} {
		got, ok := j.jobSpans(s, tc.in)
		if !ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("jobSpans(%v) = %v, %v; want %v", tc.in, got, ok, tc.want)
		}
		if err := (wire.Fences{Spans: got}).CheckSpans(11); err != nil {
			t.Errorf("jobSpans(%v) = %v: %v", tc.in, got, err)
		}
	}
	if _, ok := j.jobSpans(s, [][2]int{{9, 11}}); ok {
		t.Error("a span over tree host 10, of no session, was taken")
	}
	if ev, ok := (<-j.events).(evViolation); !ok || !strings.Contains(ev.what, "a fence for host 10, not a host of this job") {
		t.Errorf("event %+v, want the relay's violation for host 10", ev)
	}
}
