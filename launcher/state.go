package launcher

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"time"

	"gangway/agent/wire"
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
	evAbort struct {
		host int
		a    wire.Abort
	}
	evFence struct {
		host int
		f    wire.Fence
	}
	evName struct { // a rank's PMI name-service request
		host int
		n    wire.Name
	}
	evDone      struct{ host int }
	evViolation struct { // the host broke the protocol
		host int
		what string
	}
	evLost struct {
		host int
		err  error
	}
	evAgentError struct {
		host int
		msg  string
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
	actLog       struct {
		host int
		msg  string
		err  error
	} // a warning for the logs
	actDump   struct{ abort bool } // ask every host still running for its ranks' stacks
	actStacks struct {             // write and analyse the stacks collected
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
	hosts          []string // host names, by session index
	hostOf         []int    // session index, by rank
	reportBindings bool

	exited   []bool // by rank
	done     []bool // by host: Done received, or lost
	ndone    int
	failures []*RankError
	first    *RankError // the failure that stopped the job, if one did
	// runningAtFirst is how many other ranks still ran when first failed.
	runningAtFirst int
	stopping       bool
	ended          bool // the job's end is decided (its context has a cause, or a hang dump runs): nothing more is blamed
	killed         bool
	lost           []string
	fences         map[int]*fence
	dump           *dump             // the stacks being collected, nil when none are
	names          map[string]string // the job's PMI name service: service -> port
}

// dump is one collection of every rank's stacks.
type dump struct {
	pending map[int]bool // hosts that have not answered
	stop    bool         // stop the job once collected
	cause   error        // and end it with this cause (nil: the cause it has)
	stacks  map[int]string
	tools   []string
}

// maxNames bounds the job's name table: MPI programs publish a handful
// of names, and agents must not make the launcher grow without bound.
const maxNames = 4096

type fence struct {
	arrived map[int]bool
	puts    map[string]string
}

func newState(hosts []string, ranks []Rank, reportBindings bool) *state {
	st := &state{hosts: hosts, hostOf: make([]int, len(ranks)), reportBindings: reportBindings,
		exited: make([]bool, len(ranks)), done: make([]bool, len(hosts)), fences: map[int]*fence{}, names: map[string]string{}}
	for _, r := range ranks {
		st.hostOf[r.Rank] = r.Host
	}
	return st
}

// finished reports whether every host has ended (confirmed or lost) and
// no stacks are still being collected.
func (st *state) finished() bool { return st.ndone == len(st.hosts) && st.dump == nil }

// apply takes one event and returns what to do about it.
func (st *state) apply(ev any) []action {
	switch ev := ev.(type) {
	case evExit:
		return st.exit(ev.host, ev.x)
	case evAbort:
		if !st.owns(ev.host, ev.a.Rank) {
			return st.violation(ev.host, fmt.Sprintf("an abort for rank %d, which it does not run", ev.a.Rank))
		}
		return st.fail(&RankError{Rank: ev.a.Rank, Host: st.hosts[ev.host], ExitCode: ev.a.Code,
			Err: fmt.Sprintf("called MPI_Abort with code %d %s", ev.a.Code, ev.a.Msg)})
	case evFence:
		return st.fence(ev.host, ev.f)
	case evName:
		return st.name(ev.host, ev.n)
	case evDone:
		st.markDone(ev.host)
	case evLost:
		return st.lose(ev.host, ev.err)
	case evViolation:
		return st.violation(ev.host, ev.what)
	case evAgentError:
		return []action{actLog{host: ev.host, msg: "agent error", err: errors.New(ev.msg)}}
	case evStarted:
		return st.started(ev.host, ev.st)
	case evSignal:
		if ev.n == 1 {
			return append([]action{actSay{fmt.Sprintf("got %v, stopping every rank (again to kill)", ev.sig)}}, st.stop()...)
		}
		return append([]action{actSay{fmt.Sprintf("got %v again, killing every rank", ev.sig)}}, st.kill()...)
	case evCancel:
		st.ended = true
		var te *TimeoutError
		if errors.As(ev.cause, &te) && !st.stopping {
			return st.startDump(te.Error()+": collecting every rank's stacks, then stopping every rank", true, true, nil)
		}
		return st.stop()
	case evHang:
		if st.stopping || st.dump != nil {
			return nil
		}
		h := &HangError{Quiet: ev.quiet, Limit: ev.limit}
		return st.startDump(h.Error()+": collecting every rank's stacks, then stopping every rank", true, true, h)
	case evDumpRequest:
		if st.stopping || st.dump != nil {
			return nil
		}
		return st.startDump("SIGUSR1: collecting every rank's stacks; the job goes on", false, false, nil)
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
				st.lost = append(st.lost, name+" (did not confirm the end of its ranks)")
				st.markDone(h)
				acts = append(acts, actClose{h})
			}
		}
		return acts
	}
	return nil
}

type action any

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

// startDump asks every running host for its ranks' stacks; stop stops
// the job once they are in, ending it with cause unless that is nil.
// Abort lets the agents end ranks in ways that print stacks (the job is
// being stopped anyway).
func (st *state) startDump(say string, abort, stop bool, cause error) []action {
	if st.dump != nil { // a SIGUSR1 dump is on its way: stop after it
		st.dump.stop = st.dump.stop || stop
		return nil
	}
	d := &dump{pending: map[int]bool{}, stop: stop, cause: cause, stacks: map[int]string{}}
	// A job that is stopped once the stacks are in blames nobody for what
	// the collection does to its ranks (SIGABRT, SIGQUIT).
	st.ended = st.ended || stop
	for h := range st.hosts {
		if !st.done[h] {
			d.pending[h] = true
		}
	}
	st.dump = d
	acts := []action{actSay{say}, actDump{abort: abort}}
	if len(d.pending) == 0 {
		acts = append(acts, st.finishDump()...)
	}
	return acts
}

// dumped takes one host's stacks; the last host's completes the dump.
func (st *state) dumped(host int, d wire.Dumped) []action {
	if st.dump == nil || !st.dump.pending[host] {
		return nil
	}
	delete(st.dump.pending, host)
	for r, text := range d.Stacks {
		if st.owns(host, r) {
			st.dump.stacks[r] = text
		}
	}
	for _, t := range d.Tools {
		if !slices.Contains(st.dump.tools, t) {
			st.dump.tools = append(st.dump.tools, t)
		}
	}
	if len(st.dump.pending) > 0 {
		return nil
	}
	return st.finishDump()
}

// finishDump reports the stacks, then stops the job if asked to.
func (st *state) finishDump() []action {
	d := st.dump
	st.dump = nil
	acts := []action{actStacks{stacks: d.stacks, tools: d.tools}}
	if d.cause != nil {
		acts = append(acts, actCancel{d.cause})
	}
	if d.stop {
		acts = append(acts, st.stop()...)
	}
	return acts
}

func (st *state) exit(host int, x wire.Exit) []action {
	if !st.owns(host, x.Rank) {
		return st.violation(host, fmt.Sprintf("an exit for rank %d, which it does not run", x.Rank))
	}
	st.exited[x.Rank] = true
	if x.Code == 0 && x.Err == "" {
		return nil
	}
	if x.Stopped && (st.stopping || st.ended) {
		return nil // we asked for it (a stop, or a dump's SIGABRT)
	}
	return st.fail(&RankError{Rank: x.Rank, Host: st.hosts[host], Pid: x.Pid, ExitCode: x.Code, Signal: x.Signal, SignalName: x.SignalName, Err: x.Err, ErrorFile: x.ErrorFile})
}

// fail records a rank's failure; the first one before any stop is blamed
// and stops the job. Failures after a signal or timeout are listed, not
// blamed.
func (st *state) fail(e *RankError) []action {
	st.failures = append(st.failures, e)
	if st.first != nil || st.stopping || st.ended {
		return nil
	}
	st.first = e
	for r, done := range st.exited {
		if !done && r != e.Rank {
			st.runningAtFirst++
		}
	}
	return append([]action{actCancel{e}}, st.stop()...)
}

func (st *state) stop() []action {
	if st.stopping {
		return nil
	}
	st.stopping = true
	return []action{actStop{}}
}

func (st *state) kill() []action {
	if st.killed {
		return nil
	}
	st.killed, st.stopping = true, true
	return []action{actKill{}}
}

// lose ends a host whose connection dropped: its running ranks fail with
// ExitLost.
func (st *state) lose(host int, err error) []action {
	if st.done[host] {
		return nil
	}
	st.markDone(host)
	var acts []action
	if st.dump != nil && st.dump.pending[host] {
		delete(st.dump.pending, host)
		if len(st.dump.pending) == 0 {
			acts = st.finishDump()
		}
	}
	name := st.hosts[host]
	var silent silentError
	if errors.As(err, &silent) {
		// The keepalives are why, whatever the frame reader was in the
		// middle of when the connection closed.
		err = silent
	}
	msg := fmt.Sprintf("lost the agent on %s: %v", name, err)
	if err == io.EOF {
		msg = fmt.Sprintf("lost the agent on %s: connection closed", name)
	}
	st.lost = append(st.lost, msg)
	for r, h := range st.hostOf {
		if h == host && !st.exited[r] {
			st.exited[r] = true
			acts = append(acts, st.fail(&RankError{Rank: r, Host: name, ExitCode: ExitLost, Err: msg})...)
		}
	}
	return acts
}

// violation ends a host that broke the protocol.
func (st *state) violation(host int, what string) []action {
	acts := st.lose(host, fmt.Errorf("protocol violation: it sent %s", what))
	return append(acts, actClose{host})
}

// fence merges one host's arrival at barrier f.Seq; the last host's
// arrival releases every host with every host's puts.
func (st *state) fence(host int, f wire.Fence) []action {
	fs := st.fences[f.Seq]
	if fs == nil {
		fs = &fence{arrived: map[int]bool{}, puts: map[string]string{}}
		st.fences[f.Seq] = fs
	}
	fs.arrived[host] = true
	for k, v := range f.Puts {
		fs.puts[k] = v
	}
	if len(fs.arrived) < len(st.hosts) {
		return nil
	}
	delete(st.fences, f.Seq)
	return []action{actFenceDone{wire.FenceDone{Seq: f.Seq, Puts: fs.puts}}}
}

// name answers a PMI name-service request from the job's one table, so a
// name published by a rank on one host is found by ranks on every other
// (Hydra keeps one table in mpiexec too). Every request is answered at
// once: a lookup of a name nobody published is not found, never waited
// for, as Hydra answers it.
func (st *state) name(host int, n wire.Name) []action {
	if len(n.Service) > wire.MaxNameLen || len(n.Port) > wire.MaxNameLen {
		return st.violation(host, fmt.Sprintf("a name-service request of %d+%d bytes (at most %d each)", len(n.Service), len(n.Port), wire.MaxNameLen))
	}
	r := wire.NameReply{ID: n.ID, Status: wire.NameOK}
	port, exists := st.names[n.Service]
	switch n.Op {
	case wire.NamePublish:
		switch {
		case exists:
			r.Status = wire.NameExists
		case len(st.names) >= maxNames:
			r.Status = wire.NameFull
		default:
			st.names[n.Service] = n.Port
		}
	case wire.NameUnpublish:
		if !exists {
			r.Status = wire.NameNotFound
		}
		delete(st.names, n.Service)
	case wire.NameLookup:
		if !exists {
			r.Status = wire.NameNotFound
		}
		r.Port = port
	default:
		return st.violation(host, fmt.Sprintf("a name-service request with the unknown op %q", n.Op))
	}
	return []action{actNameReply{host, r}}
}

func (st *state) started(host int, s wire.Started) []action {
	if !st.reportBindings {
		return nil
	}
	ranks := make([]int, 0, len(s.Pids))
	for r := range s.Pids {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
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

// RankError is one rank's failure.
type RankError struct {
	Rank       int
	Host       string
	Pid        int
	ExitCode   int
	Signal     int
	SignalName string // as the agent names Signal ("SIGKILL")
	Err        string
	ErrorFile  string // what it wrote to TORCHELASTIC_ERROR_FILE, if anything
}

func (e *RankError) Error() string {
	switch {
	case e.Err != "":
		return fmt.Sprintf("rank %d on %s: %s (exit code %d)", e.Rank, e.Host, e.Err, e.ExitCode)
	case e.Signal != 0:
		name := e.SignalName
		if name == "" {
			name = "signal " + strconv.Itoa(e.Signal)
		}
		return fmt.Sprintf("rank %d on %s (pid %d) was killed by signal %d (%s), exit code %d", e.Rank, e.Host, e.Pid, e.Signal, name, e.ExitCode)
	default:
		return fmt.Sprintf("rank %d on %s (pid %d) exited with code %d", e.Rank, e.Host, e.Pid, e.ExitCode)
	}
}
