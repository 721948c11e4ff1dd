package engine

import (
	"context"
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
	j := &job{log: zap.NewNop(), events: make(chan any, 8), quit: make(chan struct{}), byTree: map[int]int{10: 0, 11: 1, 12: 2}}
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
