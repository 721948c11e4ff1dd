package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/bench"
	"github.com/gangway-hpc/gangway/internal/syncx"
	"github.com/gangway-hpc/gangway/internal/term"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/launcher/rankenv"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// job is one launch from the prepare phase on: its sessions, its ranks
// and the loop's state. Everything but the readers and the collector runs
// on the goroutine that called Run.
type job struct {
	cfg      cli.Config
	log      *zap.Logger
	id       string
	attempt  int // TORCHELASTIC_RESTART_COUNT
	stdin    io.Reader
	sessions []*session
	tree     *transport.Tree // nil: flat
	byTree   []int           // a host's index in the tree -> its session's (-1: none)
	offTree  []int           // the sessions of hosts outside the tree, which a spread does not reach
	ranks    []plan.Rank     // the plan; each rank's GPUs are set in prepare
	out      *console
	coll     *bench.Collector // nil when no summary, report or plot is wanted
	collDone chan error
	st       *state
	selftest *bench.Selftest // the attempt's fabric self-test, when it ran
	spares   int             // hosts standing by (Layout.Spares): slow hosts can be left out for them

	events   chan any       // from the readers: ev* values and evMsg
	stdinAck chan struct{}  // from the readers
	quit     chan struct{}  // closed by close: readers stop sending
	readers  sync.WaitGroup // blocking readers and drains
	rmu      sync.Mutex     // guards closing against readers.Go
	closing  bool           // close waits for the readers: none may start
	tickers  []*time.Ticker // the run loop's, stopped by close

	quiet   map[int]time.Time // each rank's last output when the last dump began
	quietAt time.Time

	// The run loop's deadlines, as the state's actions set them.
	dumpBy  *time.Timer // the end of the wait for the stacks being collected; nil when none are
	dumpEnd time.Time   // when dumpBy fires
	giveUp  *time.Timer // hosts that have not confirmed their stop are cut off when it fires
}

// evMsg is an agent message that only a set-up step waits for (Ready,
// Prepared, ProbeResult...).
type evMsg struct {
	host int
	msg  wire.Msg
}

// newJob starts the job's readers and its throughput collector (which
// runs under bctx: it outlives the job's cancellation and ends when
// summary closes it).
func newJob(bctx context.Context, cfg cli.Config, d Deps, id string, attempt int, c *Cluster) (*job, error) {
	j := &job{cfg: cfg, log: d.Log, id: id, attempt: attempt, stdin: d.Stdin, sessions: c.sessions, ranks: c.ranks,
		events: newEvents(len(c.sessions)), stdinAck: make(chan struct{}, 1), quit: make(chan struct{}), tree: c.tree}
	for i, s := range c.sessions {
		switch {
		case c.tree == nil:
		case c.tree.Covers(s.host):
			j.setTreeIndex(c.tree.Index(s.host), s.idx)
		default:
			j.offTree = append(j.offTree, i)
		}
	}
	var obs observer
	if !cfg.Bench.NoSummary || cfg.Bench.ReportFile != "" || cfg.Bench.PlotFile != "" {
		coll, err := newCollector(cfg.Bench)
		if err != nil {
			return nil, cli.UsageError(err)
		}
		j.coll, j.collDone, obs = coll, make(chan error, 1), coll
		go func() { j.collDone <- coll.Run(bctx) }()
	}
	names := make([]string, len(c.sessions))
	for i, s := range c.sessions {
		names[i] = s.host.Name
	}
	if cfg.Out.DisplayMap && attempt == 0 {
		rankenv.WritePlacement(d.Stderr, cfg, names, c.ranks)
	}
	j.st = newState(names, c.ranks, stateOptions{reportBindings: cfg.Out.ReportBindings, grace: cfg.Control.KillGrace, dumpTimeout: dumpTimeout})
	stderr := d.Stderr
	if cfg.Out.MergeStderr {
		stderr = d.Stdout
	}
	j.out = newConsole(cfg.Out, len(c.ranks), d.Stdout, stderr, func(r int) string { return names[j.st.hostOf[r]] }, obs)
	for _, s := range c.sessions {
		s.readDone = make(chan struct{})
		if s.notify != nil {
			s.notify.Notify(func() { j.ready(s) })
			continue
		}
		j.readers.Go(func() {
			defer close(s.readDone)
			j.read(s)
		})
	}
	return j, nil
}

// close ends every session and waits for the readers; whatever ranks are
// still running are stopped by their agents when their session ends.
func (j *job) close() {
	for _, t := range j.tickers {
		t.Stop()
	}
	for _, t := range []*time.Timer{j.dumpBy, j.giveUp} {
		if t != nil {
			t.Stop()
		}
	}
	close(j.quit)
	for _, s := range j.sessions {
		s.close()
	}
	j.rmu.Lock()
	j.closing = true // no drain starts from here on
	j.rmu.Unlock()
	j.readers.Wait()
}

// read pumps one host's messages: output goes straight to the console
// from here (so one slow host never delays another's control messages),
// everything else to the job as an event. A session of the agent tree
// has no read goroutine of its own: ready drains it when messages wait.
func (j *job) read(s *session) {
	var sc scratch
	for {
		m, err := s.conn.Recv()
		if !j.handle(s, &sc, m, err) {
			return
		}
	}
}

// handle is one message from s, or the end of its session (err); false
// when s is to be read no more.
//
// It runs in a drain, a goroutine started for each burst of a host's
// messages (tens of thousands in a large launch), so the common path is
// kept shallow: a rank's exit and start are handed to the job undecoded
// (evRaw, decoded where the job takes them: cook), output and the rarer
// messages go through their own functions. With the decoding here, a
// drain's stack grew at its first message: 6% of the launcher's CPU at
// 4,096 hosts was copying drain stacks.
func (j *job) handle(s *session, sc *scratch, m wire.Msg, err error) bool {
	switch {
	case err != nil:
		j.send(evLost{host: s.idx, err: err})
		return false
	case m.Kind == wire.KindStdinAck:
		select {
		case j.stdinAck <- struct{}{}:
		default:
		}
		return true
	case m.Kind == wire.KindOutput:
		return j.output(s, sc, m)
	case m.Kind == wire.KindExit || m.Kind == wire.KindStarted:
		return j.send(evRaw{host: s.idx, msg: m})
	}
	return j.control(s, m)
}

// output is handle's output: to the console from here (so one slow host
// never delays another's control messages).
func (j *job) output(s *session, sc *scratch, m wire.Msg) bool {
	rank, st, data, err := m.Output()
	if err == nil && j.st.owns(s.idx, rank) {
		j.out.write(sc, rank, st, data)
		m.Release() // the console keeps nothing of data
		return true
	}
	what := fmt.Sprintf("output for rank %d, which it does not run", rank)
	if err != nil {
		what = fmt.Sprintf("a bad output frame (%v)", err)
	}
	j.send(evViolation{host: s.idx, what: what})
	return false
}

// control is handle's other messages, decoded here.
func (j *job) control(s *session, m wire.Msg) bool {
	ev, err := decode(s.idx, m)
	if err != nil {
		if m.Kind == wire.KindGathered || m.Kind == wire.KindEnds {
			// Dropped, it would leave its whole subtree's answers
			// waiting out the step's timeout, or its ends unheard.
			j.send(evViolation{host: s.idx, what: err.Error()})
			return false
		}
		j.log.Warn("bad message from agent", zap.String("host", s.host.Name), zap.Stringer("kind", m.Kind), zap.Error(err))
		return true
	}
	// A relay's fences and gathered answers name hosts by their indices
	// in the tree (the transport checked that each is behind this
	// relay): to the job's.
	switch ev := ev.(type) {
	case evFences:
		j.log.Debug("subtree fence", zap.String("relay", s.host.Name), zap.Int("seq", ev.f.Seq), zap.Int("hosts", ev.f.Count()), zap.Int("spans", len(ev.f.Spans)))
		if !j.jobHosts(s, ev.f.Hosts, "a fence") {
			return false
		}
		spans, ok := j.jobSpans(s, ev.f.Spans)
		if !ok {
			return false
		}
		ev.f.Spans = spans
	case evGathered:
		if !j.jobHosts(s, ev.g.Hosts, "a "+ev.g.Kind.String()+" answer") {
			return false
		}
	case evEnds:
		if !j.jobHosts(s, ev.e.Hosts, "an end") {
			return false
		}
		spans, ok := j.jobSpans(s, ev.e.Spans)
		if !ok {
			return false
		}
		ev.e.Spans = spans
		if n := ev.e.Count(); n > 0 {
			j.log.Debug("subtree ends", zap.String("relay", s.host.Name), zap.Int("hosts", n), zap.Bool("last", ev.e.Last))
		}
		ev.hosts = j.endedHosts(ev.e)
		ev.e.Hosts, ev.e.Spans = nil, nil
		if !j.send(ev) {
			return false
		}
		return !ev.e.Last
	}
	if e, ok := ev.(evAgentError); ok {
		s.said.Store(&e.msg) // for a send that fails after it (sendFailed)
	}
	return j.send(ev) && m.Kind != wire.KindDone
}

// endedHosts is the hosts behind a relay that its e says ended cleanly and
// whose own messages have all been handled: their relay read their
// output before their end, and its Ends, on its own stream, would
// otherwise overtake what their drains have yet to take. A host whose
// messages still wait is marked ended and its drain sends its end once
// they are handled (drain). The check needs no lock: the transport
// queued a host's messages before its relay's Ends, and a drain marks
// itself pending before it takes a message and ends it draining after.
func (j *job) endedHosts(e wire.Ends) []int {
	var out []int
	e.Each(func(h int) bool {
		t := j.sessions[h]
		if t.notify == nil || t.readOver.Load() {
			out = append(out, h) // no queue of its own, or read no more
			return true
		}
		t.ended.Store(true)
		if t.pending.Load() || t.draining.Load() {
			j.ready(t) // its drain sends it (once more round, if one runs)
			return true
		}
		if t.ended.CompareAndSwap(true, false) {
			out = append(out, h)
		}
		return true
	})
	return out
}

// jobHosts turns the tree's indices in hosts, named by relay s in what
// (its fences, its gathered answers), into the job's, in place; false,
// with s's violation sent, for one that is not a host of this job.
func (j *job) jobHosts(s *session, hosts []int, what string) bool {
	for i, h := range hosts {
		idx, ok := j.jobIndex(h)
		if !ok {
			j.send(evViolation{host: s.idx, what: fmt.Sprintf("%s for host %d, not a host of this job", what, h)})
			return false
		}
		hosts[i] = idx
	}
	return true
}

// setTreeIndex records that the host at index tree in the tree is the
// job's session idx.
func (j *job) setTreeIndex(tree, idx int) {
	if tree < 0 {
		return
	}
	for len(j.byTree) <= tree {
		j.byTree = append(j.byTree, -1)
	}
	j.byTree[tree] = idx
}

// jobIndex is the job's session index of the host at index h in the tree.
func (j *job) jobIndex(h int) (int, bool) {
	if h < 0 || h >= len(j.byTree) || j.byTree[h] < 0 {
		return 0, false
	}
	return j.byTree[h], true
}

// jobSpans is jobHosts for a fence's spans (wire.Fences.Spans, checked
// by the transport): each span's hosts turned into the job's indices,
// runs of consecutive ones kept as spans, in order and apart as
// Fences.CheckSpans wants them. The tree numbers the attempt's hosts as
// the job does, so a span usually stays one span. Since no two hosts of
// the tree are one session, spans that were apart cannot overlap.
func (j *job) jobSpans(s *session, spans [][2]int) ([][2]int, bool) {
	if len(spans) == 0 {
		return nil, true
	}
	var out [][2]int
	for _, sp := range spans {
		for h := sp[0]; h <= sp[1]; h++ {
			idx, ok := j.jobIndex(h)
			if !ok {
				j.send(evViolation{host: s.idx, what: fmt.Sprintf("a fence for host %d, not a host of this job", h)})
				return nil, false
			}
			if n := len(out); n > 0 && out[n-1][1] == idx-1 {
				out[n-1][1] = idx
				continue
			}
			out = append(out, [2]int{idx, idx})
		}
	}
	slices.SortFunc(out, func(a, b [2]int) int { return a[0] - b[0] })
	merged := out[:1]
	for _, r := range out[1:] {
		if last := &merged[len(merged)-1]; last[1]+1 == r[0] {
			last[1] = r[1]
			continue
		}
		merged = append(merged, r)
	}
	return merged, true
}

// evRaw is a message handed to the job undecoded (handle); cook decodes
// it where the job takes its events.
type evRaw struct {
	host int
	msg  wire.Msg
}

// cook is ev, decoded when it came undecoded (evRaw); a message that
// does not decode is logged and dropped (nil), as handle drops it.
func (j *job) cook(ev any) any {
	r, ok := ev.(evRaw)
	if !ok {
		return ev
	}
	d, err := decode(r.host, r.msg)
	if err != nil {
		j.log.Warn("bad message from agent", zap.String("host", j.sessions[r.host].host.Name), zap.Stringer("kind", r.msg.Kind), zap.Error(err))
		return nil
	}
	return d
}

// ready is a notifying session's word that messages wait (or that it
// ended): a drain starts unless one runs, or the session is read no more,
// or the job is closing.
func (j *job) ready(s *session) {
	s.pending.Store(true)
	if s.readOver.Load() || !s.draining.CompareAndSwap(false, true) {
		return
	}
	j.rmu.Lock()
	defer j.rmu.Unlock()
	if j.closing {
		s.draining.Store(false)
		return
	}
	j.readers.Go(func() { j.drain(s) })
}

// drainScratch holds the drains' output scratch between bursts.
var drainScratch = sync.Pool{New: func() any { return new(scratch) }}

// drain handles what waits on s, in order, and returns when nothing does.
// At most one runs per session (draining); a message that arrives as it
// ends (pending) has it go round again, or a new drain start.
func (j *job) drain(s *session) {
	sc := drainScratch.Get().(*scratch)
	defer drainScratch.Put(sc)
	for {
		s.pending.Store(false)
		for {
			m, ok, err := s.conn.Poll()
			if !ok && err == nil {
				if s.ended.CompareAndSwap(true, false) {
					// Its relay said it ended; all of its messages
					// before that are handled now.
					j.send(evEnds{host: s.idx, hosts: []int{s.idx}})
				}
				break
			}
			if !j.handle(s, sc, m, err) {
				s.readOver.Store(true)
				close(s.readDone)
				return
			}
		}
		s.draining.Store(false)
		if !s.pending.Load() || !s.draining.CompareAndSwap(false, true) {
			return
		}
	}
}

// newEvents is the job's queue of events for hosts many: room for one
// from each at once (a burst of answers at a launch's step), and no
// fewer than 64. A drain whose event finds no room waits, with its
// stack, until the loop takes one: at 10,000 hosts through the tree,
// with room for 64, 3,164 drains (14 MiB of stacks) waited at the
// launch's peak; an event waiting in the queue costs a slot and the
// event.
func newEvents(hosts int) chan any {
	return make(chan any, max(64, hosts))
}

// send hands an event to the job; false once the job is closed.
func (j *job) send(ev any) bool {
	select {
	case j.events <- ev:
		return true
	case <-j.quit:
		return false
	}
}

// decode turns an agent message into the loop's event.
func decode(host int, m wire.Msg) (any, error) {
	var err error
	switch m.Kind {
	case wire.KindExit:
		xs, err := m.Exits()
		if err != nil {
			return nil, err
		}
		if len(xs) == 1 {
			return evExit{host: host, x: xs[0]}, nil
		}
		return evExits{host: host, xs: xs}, nil
	case wire.KindAbort:
		var ev evAbort
		ev.host, err = host, m.Decode(&ev.a)
		return ev, err
	case wire.KindFence:
		var ev evFence
		ev.host, err = host, m.Decode(&ev.f)
		return ev, err
	case wire.KindFences:
		var ev evFences
		ev.host, err = host, m.Decode(&ev.f)
		return ev, err
	case wire.KindName:
		var ev evName
		ev.host, err = host, m.Decode(&ev.n)
		return ev, err
	case wire.KindStarted:
		var ev evStarted
		ev.host, err = host, m.Decode(&ev.st)
		return ev, err
	case wire.KindError:
		var e wire.Error
		err = m.Decode(&e)
		return evAgentError{host: host, msg: e.Msg, stopped: e.Stopped}, err
	case wire.KindDone:
		return evDone{host: host}, nil
	case wire.KindEnds:
		var ev evEnds
		ev.host = host
		ev.e, err = m.Ends()
		return ev, err
	case wire.KindGathered:
		var ev evGathered
		ev.host = host
		ev.g, err = m.Gathered()
		return ev, err
	case wire.KindDumped:
		var ev evDumped
		ev.host, err = host, m.Decode(&ev.d)
		return ev, err
	}
	return evMsg{host: host, msg: m}, nil
}

// broadcast sends a message to every host still running, to all at
// once: a host slow to take it (at most StallTimeout, then it is cut
// off) delays no other host's copy.
func (j *job) broadcast(k wire.Kind, v any) {
	e, err := wire.Encode(k, v) // once, not once per host
	if err != nil {
		j.log.Warn("cannot encode a message for the agents", zap.Stringer("kind", k), zap.Error(err))
		return
	}
	var sends sync.WaitGroup
	send := func(i int) {
		if s := j.sessions[i]; !j.st.done[i] {
			sends.Go(func() {
				if err := s.conn.SendEncoded(e); err != nil {
					j.log.Debug("send failed", zap.String("host", s.host.Name), zap.Stringer("kind", k), zap.Error(err))
				}
			})
		}
	}
	if j.tree != nil && wire.Spreadable(k) {
		// Once per first-level relay; each passes it down its subtree.
		// Only the hosts outside the tree are sent it one by one: a
		// barrier's release at 10,000 hosts looks at none of the others.
		j.tree.Spread(k, e.Payload())
		for _, i := range j.offTree {
			send(i)
		}
	} else {
		for i := range j.sessions {
			send(i)
		}
	}
	sends.Wait()
}

// collect waits for one message of kind from every host; a lost host or
// an agent's error ends the wait.
func (j *job) collect(ctx context.Context, kind wire.Kind, timeout time.Duration) ([]wire.Msg, error) {
	return j.collectFrom(ctx, kind, nil, timeout)
}

// collectFrom is collect from the hosts whose index is in from (every
// host for nil); the answer is indexed by host, with only those set. A
// lost host or an agent's error ends the wait, whichever host it is.
func (j *job) collectFrom(ctx context.Context, kind wire.Kind, from []int, timeout time.Duration) ([]wire.Msg, error) {
	out := make([]wire.Msg, len(j.sessions))
	want := make([]bool, len(j.sessions))
	wanted := len(from)
	if from == nil {
		wanted = len(j.sessions)
		for i := range want {
			want[i] = true
		}
	}
	for _, i := range from {
		want[i] = true
	}
	got := 0
	t := time.NewTimer(timeout)
	defer t.Stop()
	for got < wanted {
		select {
		case ev := <-j.events:
			switch ev := j.cook(ev).(type) {
			case evLost:
				return nil, &hostError{Host: j.sessions[ev.host].host.Name, Err: fmt.Errorf("connection lost: %w", ev.err)}
			case evAgentError:
				return nil, &hostError{Host: j.sessions[ev.host].host.Name, Err: errors.New(ev.msg)}
			case evMsg:
				if ev.msg.Kind == kind && want[ev.host] {
					if out[ev.host].Kind == 0 {
						got++
					}
					out[ev.host] = ev.msg
				}
			case evGathered:
				// A relay's answers for its subtree, each as the host
				// would have sent it.
				if ev.g.Kind != kind {
					continue
				}
				for i, h := range ev.g.Hosts {
					if want[h] {
						if out[h].Kind == 0 {
							got++
						}
						out[h] = wire.Msg{Kind: kind, Payload: ev.g.Answers[i]}
					}
				}
			}
		case <-t.C:
			var missing []string
			for i, s := range j.sessions {
				if want[i] && out[i].Kind == 0 {
					missing = append(missing, s.host.Name)
				}
			}
			sort.Strings(missing)
			return nil, fmt.Errorf("no %s answer within %v from %s", kind, timeout, strings.Join(missing, ", "))
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	return out, nil
}

// dumpTimeout bounds how long the launcher waits for every host's stacks
// (gdb on every process of every rank) on a hang or SIGUSR1; once the job
// is being stopped (--timeout, a signal, a failure) the wait is bounded by
// --kill-grace instead (state.dumpGrace). Dump tells the agents the wait
// (Within), and they answer before it with what they have and end their
// gdbs.
const dumpTimeout = 60 * time.Second

// run is the run phase: Go to every host, the launcher's stdin to its
// rank, the loop until every host is done.
func (j *job) run(ctx context.Context, cancel context.CancelCauseFunc, sigs <-chan any) {
	j.broadcast(wire.KindGo, nil)
	stopStdin := j.forwardStdin()
	defer stopStdin()
	started := time.Now()
	done := ctx.Done()
	progress := j.ticker(j.cfg.Out.Progress && j.coll != nil, j.cfg.Out.ProgressEvery)
	hang := j.ticker(j.cfg.Control.HangTimeout > 0, min(j.cfg.Control.HangTimeout/4, time.Second))
	for !j.st.finished() {
		var ev any
		select {
		case <-progress:
			if line := progressLine(j.coll.Report(bench.Meta{}), j.attempt, time.Since(started)); line != "" {
				j.out.say(line)
			}
			continue
		case now := <-hang:
			quiet := j.out.quietFor(started, now)
			if quiet < j.cfg.Control.HangTimeout {
				continue
			}
			ev = evHang{quiet: quiet, limit: j.cfg.Control.HangTimeout}
		case ev = <-j.events:
			if ev = j.cook(ev); ev == nil {
				continue
			}
		case ev = <-sigs:
		case <-done:
			done, ev = nil, evCancel{cause: context.Cause(ctx)}
		case <-timerC(j.giveUp):
			ev = evGiveUp{}
		case <-timerC(j.dumpBy):
			ev = evDumpDeadline{}
		}
		j.do(j.st.apply(ev), cancel, started)
		if j.st.dump == nil && j.dumpBy != nil {
			j.dumpBy.Stop()
			j.dumpBy = nil
		}
	}
}

// timerC is t's channel; nil (never ready) for no timer.
func timerC(t *time.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C
}

// waitDumpFor sets the end of the wait for the stacks d from now.
func (j *job) waitDumpFor(d time.Duration) {
	if j.dumpBy != nil {
		j.dumpBy.Stop()
	}
	j.dumpBy, j.dumpEnd = time.NewTimer(d), time.Now().Add(d)
}

// ticker ticks every d while the job runs, when on; a nil channel (never
// ready) otherwise. The job's close stops it.
func (j *job) ticker(on bool, d time.Duration) <-chan time.Time {
	if !on || d <= 0 {
		return nil
	}
	t := time.NewTicker(d)
	j.tickers = append(j.tickers, t)
	return t.C
}

// do performs the loop's actions.
func (j *job) do(acts []action, cancel context.CancelCauseFunc, started time.Time) {
	for _, a := range acts {
		switch a := a.(type) {
		case actStop:
			j.log.Debug("stopping every rank", zap.Duration("grace", j.cfg.Control.KillGrace))
			j.broadcast(wire.KindStop, wire.Stop{Grace: j.cfg.Control.KillGrace})
		case actKill:
			j.broadcast(wire.KindSignal, wire.Signal{Name: "KILL"})
		case actSay:
			j.out.say(a.line)
		case actCancel:
			cancel(a.cause)
		case actFenceDone:
			j.broadcast(wire.KindFenceDone, a.f)
		case actNameReply:
			if err := j.sessions[a.host].conn.Send(wire.KindNameReply, a.r); err != nil {
				j.log.Debug("send failed", zap.String("host", j.sessions[a.host].host.Name), zap.Stringer("kind", wire.KindNameReply), zap.Error(err))
			}
		case actClose:
			j.sessions[a.host].close()
		case actDump:
			// Who printed last when, before the dump makes ranks print.
			j.quiet, j.quietAt = j.out.lastOutput(), time.Now()
			j.waitDumpFor(a.within) // counts from now, however long the sends take
			j.broadcast(wire.KindDump, wire.Dump{Abort: a.abort, Within: a.within})
		case actDumpWithin:
			if j.dumpBy != nil && time.Now().Add(a.d).Before(j.dumpEnd) {
				j.waitDumpFor(a.d)
			}
		case actGiveUpIn:
			if j.giveUp == nil {
				j.giveUp = time.NewTimer(a.d)
			}
		case actStacks:
			j.reportStacks(a, started)
		}
	}
}

// forwardStdin sends the launcher's stdin to its rank, one chunk at a
// time: the next chunk goes only after the agent acked the last, so a rank
// that does not read its stdin holds back the launcher's reads, never the
// agent's control loop. The returned function ends it.
func (j *job) forwardStdin() (stop func()) {
	rank := j.cfg.Out.Stdin
	if rank < 0 || rank >= len(j.ranks) || j.stdin == nil {
		return func() {}
	}
	c := j.sessions[j.st.hostOf[rank]].conn
	if f, ok := j.stdin.(*os.File); ok && term.Background(f) {
		// Started with & from an interactive shell: a read of the
		// terminal would stop the whole launcher (SIGTTIN), and with it
		// the job's output and control. The rank gets what < /dev/null
		// would give it.
		j.out.say(fmt.Sprintf("warning: in the background of a terminal: stdin is not read; rank %d's stdin is empty (--stdin none, or < FILE, says so)", rank))
		_ = c.SendStdin(rank, nil)
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := j.stdin.Read(buf)
			if n > 0 {
				if c.SendStdin(rank, buf[:n]) != nil {
					return
				}
				select {
				case <-j.stdinAck:
				case <-done:
					return
				}
			}
			if err != nil {
				_ = c.SendStdin(rank, nil)
				return
			}
		}
	})
	return func() {
		close(done)
		if f, ok := j.stdin.(*os.File); ok && f != os.Stdin {
			f.Close()
		}
		// A read of the terminal cannot be interrupted, so the forwarder
		// may outlive the job: the launcher's exit, which comes next, ends
		// it. Other readers (pipes) were closed above and end it now.
		select {
		case <-syncx.Done(wg.Wait):
		case <-time.After(100 * time.Millisecond):
		}
	}
}
