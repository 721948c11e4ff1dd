package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/launcher/diagnose"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// The job loop is split in two: state.apply decides (pure: data in, the
// actions to take out), job.do performs the actions (I/O). Which rank is
// blamed, which code wins, what a second signal does and when a barrier
// completes are decided here and table-tested in state_test.go.

// Events the loop feeds to apply.
type (
	evExit struct {
		host int
		x    wire.Exit
	}
	// evExits is several ranks' exits that waited together at their
	// agent (wire.Hello.BatchExits): each as its own evExit, in order.
	evExits struct {
		host int
		xs   []wire.Exit
	}
	evAbort struct {
		host int
		a    wire.Abort
	}
	evFence struct {
		host int
		f    wire.Fence
	}
	evFences struct { // a relay's fence for its subtree, hosts as the job's indices
		host int
		f    wire.Fences
	}
	// evGathered is a relay's answers for its subtree (wire.Gathered),
	// hosts as the job's indices: collect takes them as each host's own.
	evGathered struct {
		host int
		g    wire.Gathered
	}
	evName struct { // a rank's PMI name-service request
		host int
		n    wire.Name
	}
	evDone struct{ host int }
	// evEnds is an Ends (wire.Ends): from host itself (its own end: every
	// rank exited 0 or was stopped, or its Done), and for the hosts
	// behind it (a relay),
	// as the job's indices, that ended cleanly, each once its own
	// messages were handled (job.endedHosts).
	evEnds struct {
		host  int
		e     wire.Ends
		hosts []int
	}
	evViolation struct { // the host broke the protocol
		host int
		what string
	}
	evLost struct {
		host int
		err  error
	}
	evAgentError struct {
		host    int
		msg     string
		stopped bool // wire.Error.Stopped: the agent was stopped
	}
	evStarted struct {
		host int
		st   wire.Started
	}
	evSignal struct {
		sig os.Signal
		n   int
	} // the n-th signal the launcher got
	evCancel struct{ cause error } // the job's context ended
	evGiveUp struct{}              // hosts did not confirm their ranks' end in time
	evHang   struct {              // no rank printed anything for --hang-timeout
		quiet, limit time.Duration
	}
	evDumpRequest  struct{} // SIGUSR1: dump every rank's stacks, go on
	evDumpDeadline struct{} // the hosts did not all answer a Dump in time
	evDumped       struct {
		host int
		d    wire.Dumped
	}
)

// Actions apply asks the loop to perform.
type (
	actStop      struct{}                   // Stop{grace} to every host still running
	actKill      struct{}                   // SIGKILL every rank on every host still running
	actSay       struct{ line string }      // a launcher message on stderr
	actCancel    struct{ cause error }      // end the job for this cause (first cause wins)
	actFenceDone struct{ f wire.FenceDone } // release a barrier on every host
	actClose     struct{ host int }         // give up on a host: close its session
	actDump      struct {                   // ask every host still running for its ranks' stacks
		abort  bool
		within time.Duration // and wait for them this long at most
	}
	actDumpWithin struct{ d time.Duration } // wait for the stacks being collected at most d from now
	actGiveUpIn   struct{ d time.Duration } // cut off the hosts that have not confirmed their stop d from now
	actStacks     struct {                  // write and analyse the stacks collected
		stacks map[int]string
		tools  []string
	}
	actNameReply struct {
		host int
		r    wire.NameReply
	} // answer a host's name-service request
)

// state is a running job as its loop sees it; only apply changes it.
type state struct {
	hosts  []string // host names, by session index
	hostOf []int    // session index, by rank
	// byHost is the ranks in host order: host h's are
	// byHost[hostStart[h]:hostStart[h+1]].
	byHost, hostStart []int
	stateOptions

	exited     []bool // by rank: its Exit came (at most one per rank), or its host was lost
	failed     []bool // by rank: its failure is listed (once, however many ways it failed)
	gotStarted []bool // by host: its Started came (at most one per host)
	done       []bool // by host: Done received, or lost
	ndone      int
	failures   []*diagnose.RankError
	first      *diagnose.RankError // the failure that stopped the job, if one did
	// stoppedRanks is how many ranks the hosts said the launcher's stop
	// ended (an Exit marked Stopped, an Ends' count), for the report.
	stoppedRanks int
	saidSignal   bool // the first stopping signal was said (signalled)
	stopping     bool
	ended        bool // the job's end is decided (its context has a cause, or a hang dump runs): nothing more is blamed
	killed       bool
	lost         []diagnose.Lost
	barrier      barrier           // the PMI barrier the job is in
	dump         *dump             // the stacks being collected, nil when none are
	names        map[string]string // the job's PMI name service: service -> port
}

// stateOptions are what the job's loop decides with besides the events.
type stateOptions struct {
	reportBindings bool
	grace          time.Duration // --kill-grace
	dumpTimeout    time.Duration // the longest wait for stacks that stop nothing (SIGUSR1) or a hang's
}

// stopSlack is how long past --kill-grace the hosts have to confirm that
// their ranks ended (reaping, cleanup, the network) before they are cut
// off: an agent that ignores Stop holds the launcher no longer.
const stopSlack = 3 * time.Second

// dumpGrace bounds the wait for stacks once the job is being stopped (a
// timeout, a signal, a failure): --kill-grace, 1 s at least, so that
// --timeout N ends the launcher by N + 2 x --kill-grace + stopSlack
// whatever the agents do.
func (st *state) dumpGrace() time.Duration { return max(st.grace, time.Second) }

func newState(hosts []string, ranks []plan.Rank, o stateOptions) *state {
	st := &state{hosts: hosts, hostOf: make([]int, len(ranks)), stateOptions: o,
		exited: make([]bool, len(ranks)), failed: make([]bool, len(ranks)), gotStarted: make([]bool, len(hosts)),
		done: make([]bool, len(hosts)), barrier: barrier{seq: 1}, names: map[string]string{}}
	for _, r := range ranks {
		st.hostOf[r.Rank] = r.Host
	}
	st.hostStart = make([]int, len(hosts)+1)
	for _, h := range st.hostOf {
		st.hostStart[h+1]++
	}
	for h := range hosts {
		st.hostStart[h+1] += st.hostStart[h]
	}
	st.byHost = make([]int, len(st.hostOf))
	next := slices.Clone(st.hostStart[:len(hosts)])
	for r, h := range st.hostOf {
		st.byHost[next[h]] = r
		next[h]++
	}
	return st
}

// ranksOf is host's ranks, ascending.
func (st *state) ranksOf(host int) []int { return st.byHost[st.hostStart[host]:st.hostStart[host+1]] }

// ends takes an Ends: the sender's own end (every rank exited 0 or was
// stopped by the launcher, or its
// Done), and the hosts behind it that ended cleanly. A clean end stands
// for the exits of the host's ranks not heard from (each exited 0, or
// was stopped: neither is blamed),
// and for its Done. Hosts already done are not heard.
func (st *state) ends(ev evEnds) []action {
	st.stoppedRanks += ev.e.Stopped
	var acts []action
	if (ev.e.Self || ev.e.Done) && !st.done[ev.host] {
		if ev.e.Self {
			st.endClean(ev.host)
		} else {
			st.markDone(ev.host)
		}
		acts = append(acts, st.noDumpFrom(ev.host)...)
	}
	for _, h := range ev.hosts {
		if !st.done[h] {
			st.endClean(h)
			acts = append(acts, st.noDumpFrom(h)...)
		}
	}
	return acts
}

// endClean ends a host none of whose ranks failed.
func (st *state) endClean(host int) {
	for _, r := range st.ranksOf(host) {
		st.exited[r] = true
	}
	st.markDone(host)
}

// finished reports whether every host has ended (confirmed or lost) and
// no stacks are still being collected.
func (st *state) finished() bool { return st.ndone == len(st.hosts) && st.dump == nil }

// apply takes one event and returns what to do about it.
func (st *state) apply(ev any) []action {
	if h, ok := eventHost(ev); ok && st.done[h] {
		// A host that is done (confirmed, lost, cut off) is not heard
		// any more: what its reader had queued changes nothing.
		return nil
	}
	switch ev := ev.(type) {
	case evExit:
		return st.exit(ev.host, ev.x)
	case evExits:
		var acts []action
		for _, x := range ev.xs {
			acts = append(acts, st.exit(ev.host, x)...)
			if st.done[ev.host] {
				break // a violation ended the host: the rest is not heard
			}
		}
		return acts
	case evAbort:
		if !st.owns(ev.host, ev.a.Rank) {
			return st.violation(ev.host, fmt.Sprintf("an abort for rank %d, which it does not run", ev.a.Rank))
		}
		return st.fail(&diagnose.RankError{Rank: ev.a.Rank, Host: st.hosts[ev.host], ExitCode: ev.a.Code,
			Err: fmt.Sprintf("called MPI_Abort with code %d %s", ev.a.Code, ev.a.Msg)})
	case evFence:
		return st.fence(ev.host, ev.f)
	case evFences:
		return st.fences(ev.host, ev.f)
	case evName:
		return st.name(ev.host, ev.n)
	case evDone:
		st.markDone(ev.host)
	case evEnds:
		return st.ends(ev)
	case evLost:
		return st.lose(ev.host, ev.err)
	case evViolation:
		return st.violation(ev.host, ev.what)
	case evAgentError:
		// An agent's Error ends its session (the agent hangs up next).
		why := wire.Error{Msg: clip([]byte(ev.msg)), Stopped: ev.stopped}.Why()
		return append(st.lose(ev.host, errors.New(why)), actClose{ev.host})
	case evStarted:
		return st.started(ev.host, ev.st)
	case evGathered:
		return st.gathered(ev)
	case evSignal:
		return st.signalled(ev.sig, ev.n)
	case evCancel:
		st.ended = true
		var te *diagnose.TimeoutError
		if errors.As(ev.cause, &te) && !st.stopping {
			return st.startDump(te.Error()+": collecting every rank's stacks, then stopping every rank", true, true, nil, st.dumpGrace())
		}
		var se *diagnose.SignalError
		if errors.As(ev.cause, &se) {
			// The signal's own event may reach the loop only after the
			// stop has ended every rank (one relay's ends can end the
			// job): said here, the signal is never left unsaid.
			return st.signalled(se.Signal, 1)
		}
		return st.stop()
	case evHang:
		if st.stopping || st.dump != nil {
			return nil
		}
		h := &diagnose.HangError{Quiet: ev.quiet, Limit: ev.limit}
		return st.startDump(h.Error()+": collecting every rank's stacks, then stopping every rank", true, true, h, st.dumpTimeout)
	case evDumpRequest:
		if st.stopping || st.dump != nil {
			return nil
		}
		return st.startDump("SIGUSR1: collecting every rank's stacks; the job goes on", false, false, nil, st.dumpTimeout)
	case evDumped:
		return st.dumped(ev.host, ev.d)
	case evDumpDeadline:
		if st.dump == nil {
			return nil
		}
		return append([]action{actSay{"not every host sent its ranks' stacks in time; going on with what came"}}, st.finishDump()...)
	case evGiveUp:
		var acts []action
		for h, name := range st.hosts {
			if !st.done[h] {
				st.lost = append(st.lost, diagnose.Lost{Msg: name + " (did not confirm the end of its ranks)", Host: name, Index: h})
				st.markDone(h)
				acts = append(append(acts, actClose{h}), st.noDumpFrom(h)...)
			}
		}
		return acts
	}
	return nil
}

type action any

// eventHost is the host an event came from, if it came from one.
func eventHost(ev any) (int, bool) {
	switch ev := ev.(type) {
	case evExit:
		return ev.host, true
	case evExits:
		return ev.host, true
	case evAbort:
		return ev.host, true
	case evFence:
		return ev.host, true
	case evFences:
		return ev.host, true
	case evName:
		return ev.host, true
	case evDone:
		return ev.host, true
	case evViolation:
		return ev.host, true
	case evLost:
		return ev.host, true
	case evAgentError:
		return ev.host, true
	case evStarted:
		return ev.host, true
	case evDumped:
		return ev.host, true
	}
	return 0, false
}

// owns reports whether rank runs on host. It reads only what newState set,
// so the readers may call it too.
func (st *state) owns(host, rank int) bool {
	return rank >= 0 && rank < len(st.hostOf) && st.hostOf[rank] == host
}

func (st *state) markDone(host int) {
	if !st.done[host] {
		st.done[host] = true
		st.ndone++
	}
}

func (st *state) exit(host int, x wire.Exit) []action {
	if !st.owns(host, x.Rank) {
		return st.violation(host, fmt.Sprintf("an exit for rank %d, which it does not run", x.Rank))
	}
	if st.exited[x.Rank] {
		return st.violation(host, fmt.Sprintf("a second exit for rank %d", x.Rank))
	}
	st.exited[x.Rank] = true
	if x.Stopped && (st.stopping || st.ended) {
		st.stoppedRanks++
		return nil // we asked for it (a stop, or a dump's SIGABRT)
	}
	if x.Code == 0 && x.Err == "" {
		return nil
	}
	return st.fail(&diagnose.RankError{Rank: x.Rank, Host: st.hosts[host], Pid: x.Pid, ExitCode: x.Code, Signal: x.Signal, SignalName: x.SignalName, Err: x.Err, ErrorFile: x.ErrorFile})
}

// fail records a rank's failure; the first one before any stop is blamed
// and stops the job. Failures after a signal or timeout are listed, not
// blamed. A rank is listed once: its first failure (an abort, then its
// exit, counts as one; so do repeated aborts).
func (st *state) fail(e *diagnose.RankError) []action {
	if st.failed[e.Rank] {
		return nil
	}
	st.failed[e.Rank] = true
	st.failures = append(st.failures, e)
	if st.first != nil || st.stopping || st.ended {
		return nil
	}
	st.first = e
	return append([]action{actCancel{e}}, st.stop()...)
}

// signalled is the launcher's n-th stopping signal, from its event or
// from the job's context, which it cancelled (whichever the loop takes
// first): the first is said, once, and stops every rank; a second kills.
func (st *state) signalled(sig os.Signal, n int) []action {
	if n == 1 {
		if st.saidSignal {
			return nil
		}
		st.saidSignal = true
		return append([]action{actSay{fmt.Sprintf("got %s, stopping every rank (again to kill)", diagnose.SignalName(sig))}}, st.stop()...)
	}
	return append([]action{actSay{fmt.Sprintf("got %s again, killing every rank", diagnose.SignalName(sig))}}, st.kill()...)
}

// stop stops every rank, once. The hosts then have --kill-grace and
// stopSlack to confirm; stacks still being collected are waited for at
// most dumpGrace more.
func (st *state) stop() []action {
	if st.stopping {
		return nil
	}
	return append(st.stopped(), actStop{}) // the give-up counts from before the sends
}

func (st *state) kill() []action {
	if st.killed {
		return nil
	}
	var acts []action
	if !st.stopping {
		acts = st.stopped()
	}
	st.killed = true
	return append(acts, actKill{})
}

// stopped marks the job stopping and bounds how long it may take.
func (st *state) stopped() []action {
	st.stopping = true
	acts := []action{actGiveUpIn{st.grace + stopSlack}}
	if st.dump != nil {
		acts = append(acts, actDumpWithin{st.dumpGrace()})
	}
	return acts
}

// lose ends a host whose connection dropped: its running ranks fail with
// diagnose.ExitLost.
func (st *state) lose(host int, err error) []action {
	if st.done[host] {
		return nil
	}
	st.markDone(host)
	acts := st.noDumpFrom(host)
	name := st.hosts[host]
	var silent transport.SilentError
	var stalled transport.StalledError
	var cut *transport.CutOffError
	switch {
	case errors.As(err, &cut):
		// Cut off by its relay's loss: the relay's keepalives or stall
		// (inside the CutOffError) are the relay's, said below as why
		// the relay was lost, not the host's own.
		err = cut
	case errors.As(err, &silent):
		// The keepalives are why, whatever the frame reader was in the
		// middle of when the connection closed.
		err = silent
	case errors.As(err, &stalled):
		err = stalled // the same for a write that stalled
	}
	msg := fmt.Sprintf("lost the agent on %s: %v", name, err)
	if err == io.EOF {
		msg = fmt.Sprintf("lost the agent on %s: connection closed", name)
	}
	lost := diagnose.Lost{Msg: msg, Host: name, Index: host}
	rankMsg := msg
	if cut != nil {
		lost.Relay, lost.Why = cut.Relay, cut.Why()
		lost.Msg = fmt.Sprintf("lost the agent on %s: %v", name, cut)
		// Every rank its relay cut off fails the same way, whichever
		// host: they read as one failure (diagnose groups them).
		rankMsg = "lost the agent: " + cut.Error()
		// The relay's loss comes first, whichever session the launcher
		// saw end first: it is the job's failure, the rest follow.
		if r := slices.Index(st.hosts, cut.Relay); r >= 0 && !st.done[r] {
			acts = append(st.lose(r, cut.Err), acts...)
		}
	}
	st.lost = append(st.lost, lost)
	for _, r := range st.ranksOf(host) {
		if !st.exited[r] {
			st.exited[r] = true
			acts = append(acts, st.fail(&diagnose.RankError{Rank: r, Host: name, ExitCode: diagnose.ExitLost, Err: rankMsg, CutOffBy: lost.Relay})...)
		}
	}
	return acts
}

// violation ends a host that broke the protocol.
func (st *state) violation(host int, what string) []action {
	acts := st.lose(host, fmt.Errorf("protocol violation: it sent %s", what))
	return append(acts, actClose{host})
}

// gathered takes a relay's gathered Started (the set-up's answers are
// collect's): each host's as if it had come alone, but for hosts that
// are done; an answer that does not decode is its relay's violation.
func (st *state) gathered(ev evGathered) []action {
	if ev.g.Kind != wire.KindStarted {
		return nil // a set-up step's answers, after it gave up on them
	}
	var acts []action
	for i, h := range ev.g.Hosts {
		if st.done[h] { // h is a job's index (job.jobHosts)
			continue
		}
		var s wire.Started
		if err := json.Unmarshal(ev.g.Answers[i], &s); err != nil {
			return append(acts, st.violation(ev.host, fmt.Sprintf("a gathered started for %s that does not decode: %v", st.hosts[h], err))...)
		}
		acts = append(acts, st.started(h, s)...)
	}
	return acts
}

// started takes a host's one Started, with pids of its own ranks only.
func (st *state) started(host int, s wire.Started) []action {
	if st.gotStarted[host] {
		return st.violation(host, "a second started message")
	}
	st.gotStarted[host] = true
	ranks := make([]int, 0, len(s.Pids))
	for r := range s.Pids {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	for _, r := range ranks {
		if !st.owns(host, r) {
			return st.violation(host, fmt.Sprintf("a pid for rank %d, which it does not run", r))
		}
	}
	if !st.reportBindings {
		return nil
	}
	acts := make([]action, 0, len(ranks))
	for _, r := range ranks {
		b := s.Bindings[r]
		if b == "" {
			b = "not bound"
		}
		acts = append(acts, actSay{fmt.Sprintf("rank %d on %s (pid %d): CPUs %s", r, st.hosts[host], s.Pids[r], b)})
	}
	return acts
}
