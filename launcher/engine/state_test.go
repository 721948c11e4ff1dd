package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/launcher/diagnose"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// testOptions: --kill-grace 5s, a minute for stacks that stop nothing.
var testOptions = stateOptions{grace: 5 * time.Second, dumpTimeout: time.Minute}

// twoHosts is a 4-rank job: ranks 0,1 on host 0 ("a"), 2,3 on host 1 ("b").
func twoHosts() *state {
	return newState([]string{"a", "b"}, []plan.Rank{rk(0, 0, 0, 2, 0), rk(1, 0, 1, 2, 0), rk(2, 1, 0, 2, 1), rk(3, 1, 1, 2, 1)}, testOptions)
}

// run applies events in order and returns every action and the state.
func runEvents(st *state, evs ...any) []action {
	var acts []action
	for _, ev := range evs {
		acts = append(acts, st.apply(ev)...)
	}
	return acts
}

// cause is the cause the loop would have cancelled the job with: the
// first actCancel, as context.WithCancelCause keeps the first.
func cause(acts []action) error {
	for _, a := range acts {
		if c, ok := a.(actCancel); ok {
			return c.cause
		}
	}
	return nil
}

func count[T any](acts []action) int {
	n := 0
	for _, a := range acts {
		if _, ok := a.(T); ok {
			n++
		}
	}
	return n
}

func TestApplyBlame(t *testing.T) {
	tests := []struct {
		name      string
		events    []any
		wantBlame int // rank blamed (the cause), -1 for none
		wantCode  int // exitCode of the cause
		wantFails int
		wantStops int
	}{
		{"clean exit", []any{evExit{0, wire.Exit{Rank: 0}}, evExit{0, wire.Exit{Rank: 1}}}, -1, 0, 0, 0},
		{"first failure blamed", []any{evExit{1, wire.Exit{Rank: 3, Code: 7}}, evExit{0, wire.Exit{Rank: 0, Code: 143, Signal: 15, Stopped: true}}}, 3, 7, 1, 1},
		{"a later failure is listed, not blamed", []any{evExit{1, wire.Exit{Rank: 2, Code: 3}}, evExit{0, wire.Exit{Rank: 1, Code: 9}}}, 2, 3, 2, 1},
		{"killed by a signal: 128+N", []any{evExit{0, wire.Exit{Rank: 1, Code: 137, Signal: 9}}}, 1, 137, 1, 1},
		{"spawn error", []any{evExit{0, wire.Exit{Rank: 0, Code: 127, Err: "not found"}}}, 0, 127, 1, 1},
		{"exit 0 with a PMI error fails", []any{evExit{0, wire.Exit{Rank: 0, Code: 1, Err: "exited without PMI finalize"}}}, 0, 1, 1, 1},
		{"MPI_Abort wins with its code", []any{evAbort{1, wire.Abort{Rank: 3, Code: 9, Msg: "bye"}}, evExit{1, wire.Exit{Rank: 3, Code: 143, Stopped: true}}}, 3, 9, 1, 1},
		{"after a signal nothing is blamed", []any{evSignal{sig: syscall.SIGTERM, n: 1}, evExit{0, wire.Exit{Rank: 0, Code: 1}}}, -1, 0, 1, 1},
		{"after the timeout nothing is blamed", []any{evCancel{&diagnose.TimeoutError{}}, evExit{0, wire.Exit{Rank: 0, Code: 1}}, evDumpDeadline{}}, -1, 0, 1, 1},
		{"a stopped rank's code is not a failure", []any{evSignal{sig: syscall.SIGINT, n: 1}, evExit{0, wire.Exit{Rank: 0, Code: 143, Stopped: true}}}, -1, 0, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := twoHosts()
			acts := runEvents(st, tt.events...)
			c := cause(acts)
			var re *diagnose.RankError
			switch {
			case tt.wantBlame < 0 && c != nil:
				t.Errorf("blamed %v, want nobody", c)
			case tt.wantBlame >= 0 && (!errors.As(c, &re) || re.Rank != tt.wantBlame):
				t.Errorf("blamed %v, want rank %d", c, tt.wantBlame)
			}
			if c != nil {
				if got := diagnose.ExitCode(c, false); got != tt.wantCode {
					t.Errorf("exit code %d, want %d", got, tt.wantCode)
				}
			}
			if len(st.failures) != tt.wantFails {
				t.Errorf("%d failures listed, want %d: %v", len(st.failures), tt.wantFails, st.failures)
			}
			if got := count[actStop](acts); got != tt.wantStops {
				t.Errorf("%d stops sent, want %d", got, tt.wantStops)
			}
		})
	}
}

// TestApplyStoppedCount: the ranks counted as stopped are those their
// hosts said the stop ended: an exit marked Stopped, an Ends' count; not
// those that had ended well (held in a clean end the launcher hears of
// only later, through a relay: the count it once took of ranks not yet
// known to have ended took them for running), nor one that exits 0 of
// itself after the failure, nor the failed ones.
func TestApplyStoppedCount(t *testing.T) {
	st := twoHosts()
	acts := runEvents(st, evExit{1, wire.Exit{Rank: 3, Code: 2}})
	if cause(acts) == nil || st.first == nil || st.first.Rank != 3 {
		t.Fatalf("rank 3's failure not blamed: %v", acts)
	}
	runEvents(st,
		evExit{1, wire.Exit{Rank: 2, Code: 143, Signal: 15, Stopped: true}},
		evEnds{host: 1, e: wire.Ends{Done: true, Last: true}},
		// a: rank 0 had exited 0 before the failure, rank 1 was stopped
		evEnds{host: 0, e: wire.Ends{Self: true, Stopped: 1, Last: true}})
	if !st.finished() || st.stoppedRanks != 2 {
		t.Errorf("finished %v, %d stopped; want 2 (ranks 1 and 2)", st.finished(), st.stoppedRanks)
	}
	st = twoHosts()
	runEvents(st, evExit{1, wire.Exit{Rank: 3, Code: 2}}, evExit{1, wire.Exit{Rank: 2}}, evExit{0, wire.Exit{Rank: 1, Code: 1}},
		evExit{0, wire.Exit{Rank: 0, Code: 143, Stopped: true}})
	if st.stoppedRanks != 1 || len(st.failures) != 2 {
		t.Errorf("%d stopped, failures %v; want 1 (rank 0), ranks 3 and 1 failed", st.stoppedRanks, st.failures)
	}
}

// TestApplyLostAgentSilent: an agent lost to keepalives is reported as
// such, whatever the frame reader was in the middle of.
func TestApplyLostAgentSilent(t *testing.T) {
	st := twoHosts()
	mid := fmt.Errorf("wire: short output frame (5 of 65477 bytes): %w", transport.SilentError{After: 15 * time.Second})
	runEvents(st, evLost{1, mid})
	want := "lost the agent on b: no answer to SSH keepalives for 15s (host hung, stopped or cut off)"
	if !reflect.DeepEqual(diagnose.LostMessages(st.lost), []string{want}) {
		t.Errorf("lost %q, want %q", diagnose.LostMessages(st.lost), want)
	}
}

// TestApplyCutOff: a host cut off by its relay's loss loses the relay
// first; its ranks fail with the relay's loss, in words that do not
// name the host (so diagnose groups every host it cut off), and its
// loss records the relay and why for the report's one line, whether the
// relay's connection closed or went silent (a relay hung or stopped: its
// keepalives' error is inside the cut, and is the relay's, not the
// host's), and whatever the host's reader was in the middle of.
func TestApplyCutOff(t *testing.T) {
	silent := transport.SilentError{After: 15 * time.Second}
	for _, tc := range []struct {
		name     string
		err      error  // host b's session's end
		relayMsg string // what is said of the relay a
		why      string
	}{
		{"closed", &transport.CutOffError{Relay: "a", Err: io.EOF}, "lost the agent on a: connection closed", "connection closed"},
		{"silent", &transport.CutOffError{Relay: "a", Err: silent}, "lost the agent on a: " + silent.Error(), silent.Error()},
		{"silent, mid-frame", fmt.Errorf("wire: short output frame (5 of 65477 bytes): %w", &transport.CutOffError{Relay: "a", Err: silent}),
			"lost the agent on a: " + silent.Error(), silent.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := twoHosts()
			runEvents(st, evLost{1, tc.err})
			if len(st.lost) != 2 || st.lost[0].Host != "a" || st.lost[0].Relay != "" || st.lost[0].Msg != tc.relayMsg {
				t.Fatalf("lost %+v, want the relay a first, lost itself: %q", st.lost, tc.relayMsg)
			}
			cutMsg := "cut off: its relay a was lost (" + tc.why + ")"
			want := diagnose.Lost{Msg: "lost the agent on b: " + cutMsg, Host: "b", Index: 1, Relay: "a", Why: tc.why}
			if st.lost[1] != want {
				t.Errorf("lost %+v, want %+v", st.lost[1], want)
			}
			for _, f := range st.failures {
				if f.Host == "b" && (f.Err != "lost the agent: "+cutMsg || f.CutOffBy != "a") {
					t.Errorf("rank %d on b failed with %q (cut off by %q)", f.Rank, f.Err, f.CutOffBy)
				}
			}
		})
	}
}

func TestApplyLostAgent(t *testing.T) {
	st := twoHosts()
	acts := runEvents(st, evExit{1, wire.Exit{Rank: 2}}, evLost{1, io.EOF})
	var re *diagnose.RankError
	if !errors.As(cause(acts), &re) || re.Rank != 3 || re.Host != "b" || re.ExitCode != diagnose.ExitLost {
		t.Fatalf("cause %v, want rank 3 on b with exit code %d", cause(acts), diagnose.ExitLost)
	}
	if want := "lost the agent on b: connection closed"; re.Err != want || !reflect.DeepEqual(diagnose.LostMessages(st.lost), []string{want}) {
		t.Errorf("lost %q, error %q, want %q", diagnose.LostMessages(st.lost), re.Err, want)
	}
	if len(st.failures) != 1 {
		t.Errorf("failures %v: rank 2 had exited, only rank 3 was running", st.failures)
	}
	if count[actStop](acts) != 1 || !st.done[1] || st.done[0] {
		t.Errorf("want one stop and host b done: %v, done %v", acts, st.done)
	}
	// The same host lost twice (reader error after a give-up) changes nothing.
	if again := st.apply(evLost{1, io.EOF}); len(again) != 0 || len(st.lost) != 1 {
		t.Errorf("second loss: %v, lost %v", again, st.lost)
	}
	// A host lost with no running rank to blame still makes the job exit 255.
	st = twoHosts()
	runEvents(st, evExit{1, wire.Exit{Rank: 2}}, evExit{1, wire.Exit{Rank: 3}}, evLost{1, errors.New("reset")})
	if len(st.failures) != 0 || diagnose.ExitCode(nil, len(st.lost) > 0) != diagnose.ExitLost {
		t.Errorf("failures %v, lost %v: want no failure and exit %d", st.failures, st.lost, diagnose.ExitLost)
	}
}

func TestApplyProtocolViolation(t *testing.T) {
	for _, ev := range []any{
		evExit{0, wire.Exit{Rank: 2, Code: 1}},    // rank 2 runs on b
		evExit{0, wire.Exit{Rank: 1000000}},       // no such rank
		evAbort{1, wire.Abort{Rank: -1, Code: 3}}, // no such rank
		evViolation{0, "output for rank 3, which it does not run"},
	} {
		st := twoHosts()
		acts := st.apply(ev)
		if count[actClose](acts) != 1 || len(st.lost) != 1 {
			t.Errorf("%+v: actions %v, lost %v: want the session closed and the host lost", ev, acts, st.lost)
		}
		if !strings.Contains(st.lost[0].Msg, "protocol violation: it sent ") || !strings.HasPrefix(st.lost[0].Msg, "lost the agent on ") {
			t.Errorf("%+v: message %q does not name the host and the violation", ev, st.lost[0].Msg)
		}
	}
}

func TestApplySignals(t *testing.T) {
	st := twoHosts()
	acts := runEvents(st, evSignal{sig: syscall.SIGINT, n: 1})
	if count[actStop](acts) != 1 || count[actKill](acts) != 0 || count[actSay](acts) != 1 {
		t.Errorf("first signal: %v, want one message and a stop", acts)
	}
	acts = runEvents(st, evSignal{sig: syscall.SIGINT, n: 2})
	if count[actKill](acts) != 1 || count[actStop](acts) != 0 {
		t.Errorf("second signal: %v, want a kill", acts)
	}
	if acts := st.apply(evSignal{sig: syscall.SIGINT, n: 3}); count[actKill](acts) != 0 {
		t.Errorf("third signal killed again: %v", acts)
	}
	if got := diagnose.ExitCode(&diagnose.SignalError{Signal: syscall.SIGINT}, false); got != 130 {
		t.Errorf("SIGINT: exit %d, want 130", got)
	}
	// The job's context cancelled by the signal, taken before the
	// signal's own event: the signal is said there, once, and stops;
	// its event then adds nothing; a second signal kills.
	st = twoHosts()
	acts = runEvents(st, evCancel{&diagnose.SignalError{Signal: syscall.SIGINT}})
	if say, _ := find[actSay](acts); count[actStop](acts) != 1 || say.line != "got SIGINT, stopping every rank (again to kill)" {
		t.Errorf("cancelled by SIGINT: %v, want it said and a stop", acts)
	}
	if acts := runEvents(st, evSignal{sig: syscall.SIGINT, n: 1}); len(acts) != 0 {
		t.Errorf("the signal's event after its cancel: %v, want nothing", acts)
	}
	if acts := runEvents(st, evSignal{sig: syscall.SIGINT, n: 2}); count[actKill](acts) != 1 {
		t.Errorf("second signal after the cancel: %v, want a kill", acts)
	}
	// A signal after a rank failed keeps the rank's code: the first cause wins.
	st = twoHosts()
	acts = runEvents(st, evExit{0, wire.Exit{Rank: 0, Code: 5}}, evSignal{sig: syscall.SIGTERM, n: 1})
	if got := diagnose.ExitCode(cause(acts), false); got != 5 {
		t.Errorf("failure then signal: exit %d, want 5", got)
	}
}

func TestApplyFences(t *testing.T) {
	st := twoHosts()
	if acts := st.apply(evFence{0, wire.Fence{Seq: 1, Puts: map[string]string{"a": "1"}}}); len(acts) != 0 {
		t.Fatalf("one host of two released the barrier: %v", acts)
	}
	acts := st.apply(evFence{1, wire.Fence{Seq: 1, Puts: map[string]string{"b": "2"}}})
	want := []action{actFenceDone{wire.FenceDone{Seq: 1, Puts: map[string]string{"a": "1", "b": "2"}}}}
	if !reflect.DeepEqual(acts, want) {
		t.Fatalf("barrier 1: %v, want %v", acts, want)
	}
	if st.barrier.seq != 2 || st.barrier.puts != nil {
		t.Errorf("after barrier 1: %+v, want barrier 2 with nothing held", st.barrier)
	}
	acts = runEvents(st, evFence{1, wire.Fence{Seq: 2}}, evFence{0, wire.Fence{Seq: 2}})
	if len(acts) != 1 || acts[0].(actFenceDone).f.Seq != 2 {
		t.Errorf("barrier 2: %v", acts)
	}
	if len(st.lost) != 0 || len(st.failures) != 0 {
		t.Errorf("lost %v, failures %v", st.lost, st.failures)
	}
}

// TestApplySubtreeFences: a relay's fence for its subtree counts for
// every host it names; a host named twice, or by two relays, is the
// relay's protocol violation.
func TestApplySubtreeFences(t *testing.T) {
	st := twoHosts()
	acts := st.apply(evFences{0, wire.Fences{Seq: 1, Hosts: []int{0, 1}, Puts: map[string]string{"a": "1", "b": "2"}}})
	want := []action{actFenceDone{wire.FenceDone{Seq: 1, Puts: map[string]string{"a": "1", "b": "2"}}}}
	if !reflect.DeepEqual(acts, want) {
		t.Fatalf("one message for both hosts: %v, want %v", acts, want)
	}
	if acts := runEvents(st, evFences{0, wire.Fences{Seq: 2, Hosts: []int{1}}}, evFence{0, wire.Fence{Seq: 2}}); len(acts) != 1 || acts[0].(actFenceDone).f.Seq != 2 {
		t.Fatalf("a subtree's fence and a host's own: %v", acts)
	}
	// Spans, as a relay the launcher reaches itself sends them, alone and
	// beside hosts; the barrier after uses the same marks, cleared.
	if acts := st.apply(evFences{0, wire.Fences{Seq: 3, Spans: [][2]int{{0, 1}}}}); len(acts) != 1 || acts[0].(actFenceDone).f.Seq != 3 {
		t.Fatalf("both hosts as one span: %v", acts)
	}
	if acts := st.apply(evFences{0, wire.Fences{Seq: 4, Hosts: []int{0}, Spans: [][2]int{{1, 1}}}}); len(acts) != 1 || acts[0].(actFenceDone).f.Seq != 4 {
		t.Fatalf("a host and a span: %v", acts)
	}
	for _, tc := range []struct {
		name   string
		events []any
		want   string
	}{
		{"a host named twice", []any{evFences{0, wire.Fences{Seq: 1, Hosts: []int{1, 1}}}},
			"lost the agent on a: protocol violation: it sent for b fence 1 while its fence 1 was not released"},
		{"a host's own fence and its relay's", []any{evFence{1, wire.Fence{Seq: 1}}, evFences{0, wire.Fences{Seq: 1, Hosts: []int{1}}}},
			"lost the agent on a: protocol violation: it sent for b fence 1 while its fence 1 was not released"},
		{"a host out of range", []any{evFences{0, wire.Fences{Seq: 1, Hosts: []int{7}}}},
			"lost the agent on a: protocol violation: it sent a fence for host 7 of 2"},
		{"another barrier", []any{evFences{0, wire.Fences{Seq: 3, Hosts: []int{0}}}},
			"lost the agent on a: protocol violation: it sent for a fence 3, but the next barrier is 1"},
		{"a span past the last host", []any{evFences{0, wire.Fences{Seq: 1, Spans: [][2]int{{0, 1 << 40}}}}},
			"lost the agent on a: protocol violation: it sent fences: span 0 [0, 1099511627776] is not within [0, 1] in order"},
		{"a host in a span and named", []any{evFences{0, wire.Fences{Seq: 1, Hosts: []int{1}, Spans: [][2]int{{0, 1}}}}},
			"lost the agent on a: protocol violation: it sent for b fence 1 while its fence 1 was not released"},
	} {
		st := twoHosts()
		runEvents(st, tc.events...)
		if !reflect.DeepEqual(diagnose.LostMessages(st.lost), []string{tc.want}) {
			t.Errorf("%s: lost %q, want %q", tc.name, diagnose.LostMessages(st.lost), tc.want)
		}
	}
}

// TestApplyFencesOneInFlight: a host has at most one fence in flight, for
// the open barrier; anything else ends it as a protocol violation, and
// the launcher never holds a second barrier's puts.
func TestApplyFencesOneInFlight(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []any
		want   string
	}{
		{"a second fence before the release", []any{evFence{1, wire.Fence{Seq: 1}}, evFence{1, wire.Fence{Seq: 2}}},
			"lost the agent on b: protocol violation: it sent fence 2 while its fence 1 was not released"},
		{"the same fence twice", []any{evFence{1, wire.Fence{Seq: 1}}, evFence{1, wire.Fence{Seq: 1}}},
			"lost the agent on b: protocol violation: it sent fence 1 while its fence 1 was not released"},
		{"a barrier ahead", []any{evFence{1, wire.Fence{Seq: 5}}},
			"lost the agent on b: protocol violation: it sent fence 5, but the next barrier is 1"},
		{"a barrier released already", []any{evFence{0, wire.Fence{Seq: 1}}, evFence{1, wire.Fence{Seq: 1}}, evFence{1, wire.Fence{Seq: 1}}},
			"lost the agent on b: protocol violation: it sent fence 1, but the next barrier is 2"},
	} {
		st := twoHosts()
		acts := runEvents(st, tc.events...)
		if !reflect.DeepEqual(diagnose.LostMessages(st.lost), []string{tc.want}) || count[actClose](acts) != 1 {
			t.Errorf("%s: lost %q, actions %v; want %q and the session closed", tc.name, diagnose.LostMessages(st.lost), acts, tc.want)
		}
		var re *diagnose.RankError
		if !errors.As(cause(acts), &re) || re.Host != "b" || re.ExitCode != diagnose.ExitLost {
			t.Errorf("%s: cause %v, want a rank of b lost", tc.name, cause(acts))
		}
		if st.barrier.count > 1 {
			t.Errorf("%s: barrier %+v holds more than one arrival", tc.name, st.barrier)
		}
	}
}

// TestApplyExitsOnce: one Exit per rank, for the host's own ranks; a
// second is a protocol violation, and no rank is listed twice however it
// failed.
func TestApplyExitsOnce(t *testing.T) {
	st := twoHosts()
	acts := runEvents(st, evExit{1, wire.Exit{Rank: 2, Code: 1}}, evExit{1, wire.Exit{Rank: 2, Code: 1}}, evExit{1, wire.Exit{Rank: 2, Code: 1}})
	if want := []string{"lost the agent on b: protocol violation: it sent a second exit for rank 2"}; !reflect.DeepEqual(diagnose.LostMessages(st.lost), want) {
		t.Errorf("lost %q, want %q", diagnose.LostMessages(st.lost), want)
	}
	var re *diagnose.RankError
	if !errors.As(cause(acts), &re) || re.Rank != 2 || re.ExitCode != 1 {
		t.Errorf("cause %v, want rank 2's own failure", cause(acts))
	}
	// Rank 3 ran on b when b was lost: it fails too; rank 2 once.
	if len(st.failures) != 2 || st.failures[0].Rank != 2 || st.failures[1].Rank != 3 {
		t.Errorf("failures %v, want rank 2 then rank 3", st.failures)
	}

	// An abort, the same abort again and the rank's exit: one failure.
	st = twoHosts()
	acts = runEvents(st, evAbort{0, wire.Abort{Rank: 1, Code: 9}}, evAbort{0, wire.Abort{Rank: 1, Code: 9}}, evExit{0, wire.Exit{Rank: 1, Code: 9}})
	if len(st.failures) != 1 || diagnose.ExitCode(cause(acts), false) != 9 || len(st.lost) != 0 {
		t.Errorf("failures %v, lost %v, cause %v: want one failure, code 9, nobody lost", st.failures, st.lost, cause(acts))
	}
}

// TestApplyStarted: one Started per host, with pids of its own ranks.
func TestApplyStarted(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []any
		want   []string
	}{
		{"its own ranks", []any{evStarted{1, wire.Started{Pids: map[int]int{2: 10, 3: 11}}}}, nil},
		{"a rank it does not run", []any{evStarted{1, wire.Started{Pids: map[int]int{2: 10, 0: 11, 1000000: 12}}}},
			[]string{"lost the agent on b: protocol violation: it sent a pid for rank 0, which it does not run"}},
		{"twice", []any{evStarted{1, wire.Started{Pids: map[int]int{2: 10}}}, evStarted{1, wire.Started{Pids: map[int]int{3: 11}}}},
			[]string{"lost the agent on b: protocol violation: it sent a second started message"}},
	} {
		st := twoHosts()
		runEvents(st, tc.events...)
		if !reflect.DeepEqual(diagnose.LostMessages(st.lost), tc.want) {
			t.Errorf("%s: lost %q, want %q", tc.name, diagnose.LostMessages(st.lost), tc.want)
		}
	}
}

// TestApplyAgentError: an agent's Error ends its session; the host is
// lost with the agent's words, said as an error unless the agent says
// it was stopped (wire.Error.Stopped).
func TestApplyAgentError(t *testing.T) {
	st := twoHosts()
	acts := runEvents(st, evAgentError{0, "bad signal", false}, evAgentError{0, "again", false},
		evAgentError{1, "the agent was stopped (SIGTERM); its ranks are stopped", true})
	want := []string{"lost the agent on a: it reported an error: bad signal", "lost the agent on b: the agent was stopped (SIGTERM); its ranks are stopped"}
	if !reflect.DeepEqual(diagnose.LostMessages(st.lost), want) {
		t.Errorf("lost %q, want %q", diagnose.LostMessages(st.lost), want)
	}
	if count[actClose](acts) != 2 || !st.done[0] || !st.done[1] {
		t.Errorf("actions %v: want hosts a and b closed once each", acts)
	}
}

// TestApplyDoneHostNotHeard: once a host is done (lost, cut off), what its
// reader had queued changes nothing.
func TestApplyDoneHostNotHeard(t *testing.T) {
	st := twoHosts()
	runEvents(st, evViolation{1, "something"})
	failures, lost := len(st.failures), len(st.lost)
	for _, ev := range []any{
		evExit{1, wire.Exit{Rank: 2, Code: 3}},
		evAbort{1, wire.Abort{Rank: 3, Code: 4}},
		evFence{1, wire.Fence{Seq: 1}},
		evStarted{1, wire.Started{}},
		evName{1, wire.Name{Op: wire.NamePublish, Service: "s"}},
		evAgentError{1, "x", false},
		evViolation{1, "more"},
	} {
		if acts := st.apply(ev); len(acts) != 0 {
			t.Errorf("%+v from a lost host: %v", ev, acts)
		}
	}
	if len(st.failures) != failures || len(st.lost) != lost || len(st.names) != 0 || st.barrier.count != 0 || slices.Contains(st.barrier.arrived, true) {
		t.Errorf("a lost host changed the state: failures %v, lost %v", st.failures, st.lost)
	}
}

func TestApplyGiveUp(t *testing.T) {
	st := twoHosts()
	runEvents(st, evSignal{sig: syscall.SIGTERM, n: 1}, evDone{0})
	acts := st.apply(evGiveUp{})
	if !reflect.DeepEqual(acts, []action{actClose{1}}) || !st.finished() {
		t.Errorf("give up: %v, finished %v; want host b closed and the job finished", acts, st.finished())
	}
	if len(st.lost) != 1 || st.lost[0].Msg != "b (did not confirm the end of its ranks)" {
		t.Errorf("lost %q", diagnose.LostMessages(st.lost))
	}
}

// find returns the first action of type T, and whether there is one.
func find[T any](acts []action) (T, bool) {
	for _, a := range acts {
		if v, ok := a.(T); ok {
			return v, true
		}
	}
	var zero T
	return zero, false
}

// TestApplyStopBounded: whatever the agents do, the stacks of a job being
// stopped are waited for at most --kill-grace (1 s at least), and the
// hosts have --kill-grace + stopSlack to confirm the stop; then they are
// cut off and the job is finished.
func TestApplyStopBounded(t *testing.T) {
	grace := testOptions.grace
	t.Run("Timeout", func(t *testing.T) {
		st := twoHosts()
		acts := st.apply(evCancel{&diagnose.TimeoutError{After: 3 * time.Second}})
		if d, ok := find[actDump](acts); !ok || d.within != grace || !d.abort {
			t.Fatalf("timeout: %v, want a dump waited for %v", acts, grace)
		}
		acts = st.apply(evDumpDeadline{}) // neither host answered
		if g, ok := find[actGiveUpIn](acts); !ok || g.d != grace+stopSlack || count[actStop](acts) != 1 {
			t.Fatalf("dump deadline: %v, want a stop and a give-up in %v", acts, grace+stopSlack)
		}
		acts = st.apply(evGiveUp{}) // neither host confirmed
		if count[actClose](acts) != 2 || !st.finished() {
			t.Errorf("give-up: %v, finished %v; want both hosts closed and the job finished", acts, st.finished())
		}
	})
	t.Run("NoGrace", func(t *testing.T) {
		st := newState([]string{"a"}, []plan.Rank{rk(0, 0, 0, 1, 0)}, stateOptions{grace: 0, dumpTimeout: time.Minute})
		if d, _ := find[actDump](st.apply(evCancel{&diagnose.TimeoutError{}})); d.within != time.Second {
			t.Errorf("--kill-grace 0: stacks waited for %v, want 1s", d.within)
		}
	})
	t.Run("SignalDuringSIGUSR1Dump", func(t *testing.T) {
		st := twoHosts()
		if d, _ := find[actDump](st.apply(evDumpRequest{})); d.within != time.Minute {
			t.Errorf("SIGUSR1: stacks waited for %v, want the dump timeout", d.within)
		}
		acts := st.apply(evSignal{sig: syscall.SIGTERM, n: 1})
		w, ok := find[actDumpWithin](acts)
		if !ok || w.d != grace || count[actStop](acts) != 1 || count[actGiveUpIn](acts) != 1 {
			t.Errorf("signal during a dump: %v, want a stop, a give-up and the dump cut to %v", acts, grace)
		}
		// The give-up also ends the wait for the stacks of the hosts it cuts off.
		st.apply(evDumped{0, wire.Dumped{}})
		acts = st.apply(evGiveUp{})
		if count[actStacks](acts) != 1 || !st.finished() {
			t.Errorf("give-up during a dump: %v, finished %v; want the stacks reported and the job finished", acts, st.finished())
		}
	})
	t.Run("TimeoutDuringHangDump", func(t *testing.T) {
		st := twoHosts()
		if d, _ := find[actDump](st.apply(evHang{quiet: time.Minute, limit: time.Second})); d.within != time.Minute {
			t.Errorf("hang: stacks waited for %v, want the dump timeout", d.within)
		}
		if w, ok := find[actDumpWithin](st.apply(evCancel{&diagnose.TimeoutError{}})); !ok || w.d != grace {
			t.Errorf("timeout during a hang dump: want the wait cut to %v", grace)
		}
	})
	t.Run("KillAfterStop", func(t *testing.T) {
		st := twoHosts()
		acts := runEvents(st, evSignal{sig: syscall.SIGINT, n: 1}, evSignal{sig: syscall.SIGINT, n: 2})
		if count[actGiveUpIn](acts) != 1 || count[actKill](acts) != 1 {
			t.Errorf("%v: want one give-up and one kill", acts)
		}
	})
}

// TestApplyDumps: a hang, the timeout and SIGUSR1 collect every rank's
// stacks before anything is stopped; a hang and the timeout then stop the
// job, SIGUSR1 does not.
func TestApplyDumps(t *testing.T) {
	stacks := func(r int) wire.Dumped {
		return wire.Dumped{Stacks: map[int]string{r: "s", r + 1: "s"}, Tools: []string{"gdb"}}
	}
	t.Run("Hang", func(t *testing.T) {
		st := twoHosts()
		acts := st.apply(evHang{quiet: 11 * time.Second, limit: 10 * time.Second})
		if count[actDump](acts) != 1 || count[actStop](acts) != 0 {
			t.Fatalf("hang: %v, want a dump and no stop yet", acts)
		}
		// The dump's SIGABRT ends rank 1 (its agent says so): nobody is
		// blamed; a rank failing by itself meanwhile is listed, not blamed.
		if acts := runEvents(st, evExit{0, wire.Exit{Rank: 1, Code: 134, Signal: 6, Stopped: true}}, evExit{1, wire.Exit{Rank: 3, Code: 1}}); cause(acts) != nil {
			t.Errorf("blamed %v during a hang dump", cause(acts))
		}
		if len(st.failures) != 1 {
			t.Errorf("failures %v, want rank 3's", st.failures)
		}
		st.failures = nil
		if acts := st.apply(evHang{quiet: 12 * time.Second, limit: 10 * time.Second}); len(acts) != 0 {
			t.Errorf("a second hang tick during the dump: %v", acts)
		}
		if acts := st.apply(evDumped{0, stacks(0)}); len(acts) != 0 {
			t.Errorf("one host of two answered: %v", acts)
		}
		acts = st.apply(evDumped{1, stacks(2)})
		var got actStacks
		for _, a := range acts {
			if s, ok := a.(actStacks); ok {
				got = s
			}
		}
		if len(got.stacks) != 4 || count[actStop](acts) != 1 {
			t.Fatalf("all answered: %v, want 4 ranks' stacks and a stop", acts)
		}
		if len(st.failures) != 0 {
			t.Errorf("failures %v", st.failures)
		}
		var he *diagnose.HangError
		if !errors.As(cause(acts), &he) || diagnose.ExitCode(he, false) != diagnose.ExitTimeout {
			t.Errorf("cause %v, want a diagnose.HangError exiting %d", cause(acts), diagnose.ExitTimeout)
		}
	})
	t.Run("SIGUSR1", func(t *testing.T) {
		st := twoHosts()
		acts := runEvents(st, evDumpRequest{}, evDumped{0, stacks(0)}, evDumped{1, stacks(2)})
		if count[actStacks](acts) != 1 || count[actStop](acts) != 0 || cause(acts) != nil {
			t.Errorf("SIGUSR1: %v, want the stacks and nothing stopped", acts)
		}
	})
	t.Run("StacksOnlyFromOwnRanks", func(t *testing.T) {
		st := twoHosts()
		acts := runEvents(st, evDumpRequest{}, evDumped{0, wire.Dumped{Stacks: map[int]string{0: "a", 3: "lie"}}}, evDumped{1, stacks(2)})
		for _, a := range acts {
			if s, ok := a.(actStacks); ok && s.stacks[3] != "s" {
				t.Errorf("rank 3's stacks %q, want host b's", s.stacks[3])
			}
		}
	})
	t.Run("ToolsBounded", func(t *testing.T) {
		st := twoHosts()
		var tools []string
		for i := range 1000 {
			tools = append(tools, "tool"+strconv.Itoa(i))
		}
		tools = append(tools, strings.Repeat("x", maxToolLen+1))
		acts := runEvents(st, evDumpRequest{}, evDumped{0, wire.Dumped{Tools: tools}}, evDumped{1, wire.Dumped{Tools: []string{"gdb", "gdb"}}})
		for _, a := range acts {
			if s, ok := a.(actStacks); ok && len(s.tools) != maxTools {
				t.Errorf("tools %d, want at most %d", len(s.tools), maxTools)
			}
		}
	})
	t.Run("LostHostDuringDump", func(t *testing.T) {
		st := twoHosts()
		acts := runEvents(st, evHang{quiet: time.Minute, limit: time.Second}, evDumped{0, stacks(0)}, evLost{1, io.EOF})
		if count[actStacks](acts) != 1 {
			t.Errorf("the lost host's dump was waited for: %v", acts)
		}
	})
	t.Run("TimeoutDuringSIGUSR1Dump", func(t *testing.T) {
		st := twoHosts()
		acts := runEvents(st, evDumpRequest{}, evCancel{&diagnose.TimeoutError{}}, evDumpDeadline{})
		if count[actDump](acts) != 1 || count[actStop](acts) != 1 {
			t.Errorf("%v: want one dump, then a stop", acts)
		}
	})
}

// TestApplyNames: the job's one PMI name table. A name published on one
// host is found from the other; a duplicate, an unknown name and a second
// unpublish are answered at once with their statuses; each reply goes to
// the asking host with its request's ID.
func TestApplyNames(t *testing.T) {
	st := twoHosts()
	name := func(host int, id uint64, op, service, port string) evName {
		return evName{host, wire.Name{ID: id, Op: op, Service: service, Port: port}}
	}
	reply := func(host int, id uint64, status, port string) action {
		return actNameReply{host, wire.NameReply{ID: id, Status: status, Port: port}}
	}
	for _, tc := range []struct {
		name string
		ev   evName
		want action
	}{
		{"lookup before publish: not found at once", name(1, 1, wire.NameLookup, "svc", ""), reply(1, 1, wire.NameNotFound, "")},
		{"publish", name(0, 1, wire.NamePublish, "svc", "tag#0$port#5$"), reply(0, 1, wire.NameOK, "")},
		{"publish again from another host: exists", name(1, 2, wire.NamePublish, "svc", "other"), reply(1, 2, wire.NameExists, "")},
		{"lookup from the other host", name(1, 3, wire.NameLookup, "svc", ""), reply(1, 3, wire.NameOK, "tag#0$port#5$")},
		{"lookup from the publisher's host", name(0, 2, wire.NameLookup, "svc", ""), reply(0, 2, wire.NameOK, "tag#0$port#5$")},
		{"lookup of another name", name(0, 3, wire.NameLookup, "nosuch", ""), reply(0, 3, wire.NameNotFound, "")},
		{"unpublish from the other host", name(1, 4, wire.NameUnpublish, "svc", ""), reply(1, 4, wire.NameOK, "")},
		{"unpublish again", name(0, 4, wire.NameUnpublish, "svc", ""), reply(0, 4, wire.NameNotFound, "")},
		{"lookup after unpublish", name(1, 5, wire.NameLookup, "svc", ""), reply(1, 5, wire.NameNotFound, "")},
		{"publish after unpublish", name(1, 6, wire.NamePublish, "svc", "again"), reply(1, 6, wire.NameOK, "")},
		{"the new port", name(0, 5, wire.NameLookup, "svc", ""), reply(0, 5, wire.NameOK, "again")},
	} {
		acts := st.apply(tc.ev)
		if len(acts) != 1 || !reflect.DeepEqual(acts[0], tc.want) {
			t.Errorf("%s: actions %+v, want [%+v]", tc.name, acts, tc.want)
		}
	}
	if len(st.failures) != 0 || len(st.lost) != 0 || st.stopping {
		t.Errorf("name requests failed or stopped the job: %v %v", st.failures, st.lost)
	}
}

// TestApplyNamesBounded: the table holds maxNames names (later publishes
// are refused with NameFull, and lookups still work); a request over
// wire.MaxNameLen or with an unknown op is a protocol violation that ends
// its host.
func TestApplyNamesBounded(t *testing.T) {
	st := twoHosts()
	for i := range maxNames {
		acts := st.apply(evName{0, wire.Name{ID: uint64(i), Op: wire.NamePublish, Service: "s" + strconv.Itoa(i), Port: "p"}})
		if r := acts[0].(actNameReply).r; r.Status != wire.NameOK {
			t.Fatalf("publish %d: %+v", i, r)
		}
	}
	if r := st.apply(evName{1, wire.Name{ID: 9, Op: wire.NamePublish, Service: "one-too-many", Port: "p"}})[0].(actNameReply).r; r.Status != wire.NameFull {
		t.Errorf("publish past maxNames: %+v, want %s", r, wire.NameFull)
	}
	if r := st.apply(evName{1, wire.Name{ID: 10, Op: wire.NameLookup, Service: "s7"}})[0].(actNameReply).r; r.Status != wire.NameOK || r.Port != "p" {
		t.Errorf("lookup in a full table: %+v", r)
	}
	for _, tc := range []struct {
		name string
		n    wire.Name
		want string
	}{
		{"long service", wire.Name{Op: wire.NamePublish, Service: strings.Repeat("s", wire.MaxNameLen+1)}, "a name-service request of 1025+0 bytes"},
		{"long port", wire.Name{Op: wire.NamePublish, Service: "s", Port: strings.Repeat("p", wire.MaxNameLen+1)}, "a name-service request of 1+1025 bytes"},
		{"unknown op", wire.Name{Op: "rename", Service: "s"}, `unknown op "rename"`},
	} {
		st := twoHosts()
		acts := st.apply(evName{1, tc.n})
		var re *diagnose.RankError
		if !errors.As(cause(acts), &re) || re.Host != "b" || !strings.Contains(re.Err, "protocol violation") || !strings.Contains(re.Err, tc.want) {
			t.Errorf("%s: cause %v, want host b's protocol violation naming %q", tc.name, cause(acts), tc.want)
		}
		if count[actClose](acts) != 1 || count[actNameReply](acts) != 0 {
			t.Errorf("%s: actions %v, want the host closed and no reply", tc.name, acts)
		}
	}
}

// TestApplyExitBatch: exits that came in one frame (wire.Hello.BatchExits)
// are taken as the same exits one by one: the same blame, failures and
// stop; a batch whose exit is a violation ends its host there, and the
// rest of the batch is not heard.
func TestApplyExitBatch(t *testing.T) {
	xs := []wire.Exit{{Rank: 2, Code: 0}, {Rank: 3, Code: 7}}
	one, batch := twoHosts(), twoHosts()
	a1 := runEvents(one, evExit{1, xs[0]}, evExit{1, xs[1]})
	a2 := runEvents(batch, evExits{1, xs})
	if !reflect.DeepEqual(one.failures, batch.failures) || !reflect.DeepEqual(one.exited, batch.exited) ||
		count[actStop](a1) != count[actStop](a2) || fmt.Sprint(cause(a1)) != fmt.Sprint(cause(a2)) {
		t.Errorf("batch: failures %v exited %v stops %d cause %v; one by one: %v %v %d %v",
			batch.failures, batch.exited, count[actStop](a2), cause(a2), one.failures, one.exited, count[actStop](a1), cause(a1))
	}
	// Rank 0 runs on a, not b: b is lost at it, rank 3's exit unheard.
	st := twoHosts()
	runEvents(st, evExits{1, []wire.Exit{{Rank: 2}, {Rank: 0, Code: 1}, {Rank: 3, Code: 5}}})
	if want := []string{"lost the agent on b: protocol violation: it sent an exit for rank 0, which it does not run"}; !reflect.DeepEqual(diagnose.LostMessages(st.lost), want) {
		t.Errorf("lost %q, want %q", diagnose.LostMessages(st.lost), want)
	}
	if st.exited[0] {
		t.Errorf("rank 0's exit was taken from b")
	}
	for _, f := range st.failures {
		if f.Rank == 3 && f.ExitCode == 5 {
			t.Errorf("rank 3's exit 5, after the violation in its batch, was taken: %v", st.failures)
		}
	}
}

// TestApplyGatheredStarted: a relay's gathered Started is each host's as
// if it came alone (its ranks checked, a second one a violation of that
// host), skips a host already done, and an answer that does not decode
// is the relay's violation.
func TestApplyGatheredStarted(t *testing.T) {
	g := func(hosts []int, answers ...string) evGathered {
		ev := evGathered{host: 0, g: wire.Gathered{Kind: wire.KindStarted, Hosts: hosts}}
		for _, a := range answers {
			ev.g.Answers = append(ev.g.Answers, []byte(a))
		}
		return ev
	}
	for _, tc := range []struct {
		name   string
		events []any
		want   []string
	}{
		{"both hosts' own ranks", []any{g([]int{0, 1}, `{"pids":{"0":10,"1":11}}`, `{"pids":{"2":12,"3":13}}`)}, nil},
		{"a rank the host does not run", []any{g([]int{0, 1}, `{"pids":{"0":10}}`, `{"pids":{"0":12}}`)},
			[]string{"lost the agent on b: protocol violation: it sent a pid for rank 0, which it does not run"}},
		{"after its own", []any{evStarted{1, wire.Started{Pids: map[int]int{2: 10}}}, g([]int{1}, `{"pids":{"3":11}}`)},
			[]string{"lost the agent on b: protocol violation: it sent a second started message"}},
		{"a host done", []any{evDone{1}, g([]int{1}, `{"pids":{"0":11}}`)}, nil},
		{"not JSON", []any{g([]int{1}, `{"pids":`)}, []string{"lost the agent on a: protocol violation: it sent a gathered started for b that does not decode"}},
		{"a set-up's answers", []any{evGathered{host: 0, g: wire.Gathered{Kind: wire.KindReady, Hosts: []int{1}, Answers: []json.RawMessage{[]byte(`{"err":"x"}`)}}}}, nil},
	} {
		st := twoHosts()
		runEvents(st, tc.events...)
		if len(st.lost) != len(tc.want) {
			t.Errorf("%s: lost %q, want %q", tc.name, diagnose.LostMessages(st.lost), tc.want)
			continue
		}
		for i := range tc.want {
			if !strings.HasPrefix(st.lost[i].Msg, tc.want[i]) {
				t.Errorf("%s: lost %q, want %q", tc.name, diagnose.LostMessages(st.lost), tc.want)
			}
		}
	}
}

// TestApplyEnds: an Ends is its sender's own end (Self: every rank
// exited 0; Done: its Done) and the clean end of the hosts behind it:
// their ranks count as exited, the hosts as done, whatever the
// placement (ranks round-robin here); a host already done is not heard;
// a failure among them is blamed as ever, the clean ends not counted
// as stopped.
func TestApplyEnds(t *testing.T) {
	var ranks []plan.Rank
	for r := range 9 {
		ranks = append(ranks, rk(r, r%3, r/3, 3, r%3))
	}
	st := newState([]string{"r", "a", "b"}, ranks, testOptions)
	if got := st.ranksOf(1); !slices.Equal(got, []int{1, 4, 7}) {
		t.Fatalf("ranks of host 1: %v", got)
	}
	acts := runEvents(st, evEnds{host: 0, e: wire.Ends{Self: true}, hosts: []int{1}})
	if len(acts) != 0 || !st.done[0] || !st.done[1] || st.done[2] || st.finished() {
		t.Fatalf("after r's ends: acts %v, done %v", acts, st.done)
	}
	for r := range 9 {
		if want := r%3 != 2; st.exited[r] != want {
			t.Errorf("rank %d exited %v, want %v", r, st.exited[r], want)
		}
	}
	acts = runEvents(st, evExit{2, wire.Exit{Rank: 5, Code: 3}})
	if cause(acts) == nil {
		t.Errorf("rank 5's failure not blamed: %v", acts)
	}
	// Host 1 again (a relay's second word on it) changes nothing.
	runEvents(st, evEnds{host: 0, hosts: []int{1}}, evExit{2, wire.Exit{Rank: 2, Stopped: true, Code: 143}}, evExit{2, wire.Exit{Rank: 8, Stopped: true, Code: 143}})
	if st.finished() {
		t.Fatal("finished before b's end")
	}
	runEvents(st, evEnds{host: 2, e: wire.Ends{Done: true, Last: true}})
	if !st.finished() || len(st.failures) != 1 || st.failures[0].Rank != 5 || st.stoppedRanks != 2 {
		t.Errorf("after b's done: finished %v, failures %v, %d stopped (want 2: ranks 2 and 8)", st.finished(), st.failures, st.stoppedRanks)
	}
}
