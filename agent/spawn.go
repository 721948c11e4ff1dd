package agent

import (
	"context"
	"errors"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/proc"
	"github.com/gangway-hpc/gangway/agent/wire"
)

// spawn starts the prepared job's ranks (Go) in three steps: their specs
// (environment, binding, PMI socket: rankSpecs), their start (start),
// and the report: an Exit for every rank that could not start, Started
// with the pids and bindings of the others, an Exit for each when it
// ends (exitOf), and Done once all have ended and the job's resources
// are gone (jobEnded).
func (s *session) spawn(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.job
	if j == nil {
		return errors.New("go before start")
	}
	if s.procs != nil {
		return errors.New("job already started")
	}
	s.procs = map[int]*proc.Proc{}
	cg := s.a.jobCgroup(s.log, s.jobID)
	specs, bindings := s.rankSpecs(j, cg)
	procs, errs := s.start(ctx, specs)
	started := 0
	for _, err := range errs {
		if err == nil {
			started++
		}
	}
	s.exits.expectExits(started)
	var all sync.WaitGroup
	for i, p := range procs {
		rank := specs[i].Rank
		if err := errs[i]; err != nil {
			res := proc.StartResult(rank, err)
			s.exits.failed()
			_ = s.conn.Send(wire.KindExit, wire.Exit{Rank: rank, Code: res.Code, Err: err.Error()})
			continue
		}
		s.procs[rank] = p
		all.Add(1)
		s.waiters.Go(func() {
			defer all.Done()
			res := p.Wait()
			if s.a.rankEnded != nil {
				s.a.rankEnded(res.Rank)
			}
			s.sendExit(s.exitOf(res))
		})
	}
	// After every start: a supervised rank's pid is known once its
	// supervisor has started the program, and supervisors start together.
	pids := make(map[int]int, len(s.procs))
	for rank, p := range s.procs {
		pids[rank] = p.Pid()
	}
	err := s.answer(s.relay.Load(), wire.KindStarted, wire.Started{Pids: pids, Bindings: bindings})
	s.log.Debug("ranks started", zap.Int("ranks", len(pids)))
	s.waiters.Go(func() {
		all.Wait()
		s.jobEnded(cg, err == nil)
	})
	return err
}

// rankSpecs builds what starts each of j's ranks: its environment
// (rankEnv), CPU binding, PMI socket and the job's supervisor and cgroup
// (cg, nil for none). A rank whose binding fails gets its Exit (code 1)
// now and no spec. bindings are the bound ranks' CPU lists, for Started.
// s.mu is held.
func (s *session) rankSpecs(j *wire.StartJob, cg *proc.Cgroup) (specs []proc.Spec, bindings map[int]string) {
	base := s.a.baseEnv()
	binder := s.a.binder(allowedCPUs())
	bindings = map[int]string{}
	for _, r := range j.Ranks {
		env := rankEnv(base, s.login.Account, s.errorFile(j.Env, r), j.Env, r, s.pmiEnv[r.Rank])
		cpus, err := binder.bind(j.Bind, r, s.facts)
		if err != nil {
			s.exits.failed()
			_ = s.conn.Send(wire.KindExit, wire.Exit{Rank: r.Rank, Code: 1, Err: "-bind-to " + j.Bind + ": " + err.Error()})
			continue
		}
		spec := proc.Spec{Rank: r.Rank, Argv: r.Argv, Env: env, Dir: r.Dir, Stdin: r.Rank == j.StdinRank, Grace: j.KillGrace,
			Supervisor: s.a.Supervisor, Cgroup: cg, Credential: s.login.Account.Credential(), CPUs: cpus}
		if f := s.pmiFDs[r.Rank]; f != nil {
			spec.ExtraFiles = []*os.File{f}
		}
		if cpus != nil {
			bindings[r.Rank] = FormatCPUList(cpus)
		}
		specs = append(specs, spec)
	}
	return specs, bindings
}

// start starts the ranks of specs, their output going to the launcher
// (and to a dump's capture): under one supervisor for all of this host's
// ranks when the agent has one (one re-execution of the agent per job,
// not per rank), else directly. procs[i] and errs[i] are specs[i]'s.
// The PMI sockets' agent ends are closed after: the programs (or their
// supervisor) have their own copies.
func (s *session) start(ctx context.Context, specs []proc.Spec) (procs []*proc.Proc, errs []error) {
	sink := func(rank int, st proc.Stream, data []byte) {
		s.capture.add(rank, st, data)
		if err := s.conn.SendOutput(rank, wire.Stream(st), data); err != nil {
			s.outputLost(rank, err)
		}
	}
	if s.a.Supervisor != "" {
		procs, errs = proc.StartGroup(ctx, specs, sink)
	} else {
		procs, errs = make([]*proc.Proc, len(specs)), make([]error, len(specs))
		for i, spec := range specs {
			procs[i], errs[i] = proc.Start(ctx, spec, sink)
		}
	}
	for _, f := range s.pmiFDs {
		f.Close()
	}
	return procs, errs
}

// exitOf is a started rank's Exit for its result: stopped when a stop or
// a dump's signal ended it; a failure of its own when the PMI server
// dropped it (pmiFailed), when it exited 0 having initialized PMI but not
// finalized it, or when its supervised program could not start; with its
// error file when it failed.
func (s *session) exitOf(res proc.Result) wire.Exit {
	x := wire.Exit{Rank: res.Rank, Pid: res.Pid, Code: res.Code, Signal: int(res.Signal), SignalName: proc.SignalName(res.Signal),
		Stopped: res.Stopped || s.endedByDump(res.Rank)}
	switch {
	case s.pmi == nil:
	case s.pmi.Failed(res.Rank) != nil:
		// Stopped by pmiFailed: a failure of its own.
		x.Err, x.Stopped = s.pmi.Failed(res.Rank).Error(), false
		x.Code = max(x.Code, 1)
	case x.Code == 0 && s.pmi.Initialized(res.Rank) && !s.pmi.Finalized(res.Rank):
		x.Code, x.Err = 1, "exited without PMI finalize (MPI_Finalize not called)"
	}
	if res.Err != nil && x.Err == "" {
		// A supervised program that could not start: a failure of its
		// own, even when a stop reached its supervisor.
		x.Err, x.Stopped = res.Err.Error(), false
	}
	if x.Code != 0 {
		x.ErrorFile = s.readErrorFile(res.Rank)
	}
	return x
}

// jobEnded releases the job once every started rank's Exit has been
// sent: its error files (now, not at the session's end, which an agent
// killed once the job is over, a Slurm step's end, never reaches), its
// PMI server, and its cgroup, with whatever escaped the ranks'
// supervisors; then, when Started was sent, Done, after any stacks being
// collected.
func (s *session) jobEnded(cg *proc.Cgroup, started bool) {
	s.removeErrorFiles()
	if s.pmi != nil {
		s.pmi.Close()
	}
	if cg != nil {
		if err := cg.Close(cgroupCloseTimeout); err != nil {
			s.log.Warn("job cgroup", zap.Error(err))
		}
	}
	s.exits.flushed()
	if started {
		s.dumping.Lock() // stacks being collected go first
		s.sendEnd()
		s.dumping.Unlock()
	}
	if s.pmi != nil && s.pmi.Held() > freeOSMemoryAbove {
		// The job's PMI keys (up to pmi.Limits' bytes) are garbage now:
		// give the memory back to the host at once, not when the runtime
		// gets round to it, so that an idle agent shows what it holds. A
		// full collection costs a millisecond or more, so only after a
		// job that kept much, and after Done.
		debug.FreeOSMemory()
	}
}

// sendEnd says that this host's job ended, every exit sent: Done, or,
// told Hello.Ends, one Ends marked Last (its relay, if it has one,
// counts it): Self when every rank exited 0 or was stopped by the
// launcher (their exits were held, not sent; Stopped counts the
// latter), else Done. A relay whose children were given the job takes
// it into its subtree's Ends instead.
func (s *session) sendEnd() {
	if !s.ends {
		_ = s.conn.Send(wire.KindDone, nil)
		return
	}
	clean, stopped := s.exits.clean()
	if rl := s.relay.Load(); rl != nil && rl.OwnEnded(clean, stopped) {
		return
	}
	_ = s.conn.Send(wire.KindEnds, wire.Ends{Self: clean, Done: !clean, Stopped: stopped, Last: true})
}

// freeOSMemoryAbove is how many bytes of PMI keys a job must have kept
// for its end to return the agent's free memory to the host at once.
const freeOSMemoryAbove = 4 << 20

// exitBatch holds the exits that wait to be sent (session.sendExit).
type exitBatch struct {
	mu      sync.Mutex
	pending []wire.Exit
	sending bool
	running int            // started ranks whose exit has not come yet
	linger  *time.Timer    // armed while successful exits wait for others
	timers  sync.WaitGroup // the linger's callback, from arming to its end

	// Told Hello.Ends: the successful and stopped exits held back (sent
	// only if a failure follows, before it), and whether one failed.
	held    []wire.Exit
	unclean bool
	stopped int // of held, those the launcher ended (Exit.Stopped)
}

// failed records an exit that failed, sent by other means (a rank that
// could not be started): the host's end is not a clean one.
func (b *exitBatch) failed() {
	b.mu.Lock()
	b.unclean = true
	b.mu.Unlock()
}

// clean reports whether every exit was a success or the launcher's
// stop (none failed), and if so how many were its stop.
func (b *exitBatch) clean() (clean bool, stopped int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.unclean {
		return false, 0
	}
	return true, b.stopped
}

// success reports whether x is a rank's success: code 0, no signal, no
// error.
func success(x wire.Exit) bool { return x.Code == 0 && x.Signal == 0 && x.Err == "" }

// exitLinger is how long a rank's successful exit may wait for its
// host's other ranks' exits before it is sent alone. Only reports of
// success wait: a failure, a signal or a stop goes at once (with the
// successes that waited before it, in order), and the last rank's exit
// goes at once, so neither a failure's stop nor the job's end waits for
// it. A host's ranks that finish a job together (after its last
// barrier) then cost the launcher one frame, not one each.
const exitLinger = 250 * time.Millisecond

// expectExits sets how many started ranks will report their exits.
func (b *exitBatch) expectExits(n int) {
	b.mu.Lock()
	b.running += n
	b.mu.Unlock()
}

// sendExit sends a rank's exit. Told Hello.BatchExits, it sends as group
// commit does: an exit that comes while another is being sent waits,
// and the sender then sends every exit that waited in one frame (at most
// wire.MaxExitBatch bytes a frame) before it returns. A successful exit
// while other ranks still run waits too, at most exitLinger (see there).
// Done waits for every exit (exitBatch.flushed).
//
// Told Hello.Ends, a success, or an exit the launcher caused (its stop,
// a dump's signal: Stopped, which it does not blame), is held and never
// sent while every exit before it was one too (the host's Ends says
// them all); the first failure sends those held before it, and every
// exit after it goes as above. So a job stopped at a failure ends at the
// launcher with the failure and one Ends a subtree, not an exit frame
// and a Done a host.
func (s *session) sendExit(x wire.Exit) {
	b := &s.exits
	if s.ends {
		b.mu.Lock()
		if !b.unclean && (success(x) || x.Stopped) {
			b.held = append(b.held, x)
			if x.Stopped {
				b.stopped++
			}
			b.running--
			b.mu.Unlock()
			return
		}
		if !b.unclean {
			b.unclean = true
			b.pending = append(b.held, b.pending...)
			b.held = nil
		}
		b.mu.Unlock()
	}
	if !s.batchExits {
		b.mu.Lock()
		held := b.pending
		b.pending = nil
		b.mu.Unlock()
		for _, h := range held {
			_ = s.conn.Send(wire.KindExit, h)
		}
		_ = s.conn.Send(wire.KindExit, x)
		return
	}
	b.mu.Lock()
	b.pending = append(b.pending, x)
	b.running--
	if b.sending {
		b.mu.Unlock()
		return
	}
	if success(x) && b.running > 0 && pendingSize(b.pending) <= wire.MaxExitBatch {
		if b.linger == nil {
			b.timers.Add(1)
			d := exitLinger
			if s.a.exitLinger > 0 {
				d = s.a.exitLinger
			}
			b.linger = time.AfterFunc(d, func() {
				defer b.timers.Done()
				b.mu.Lock()
				b.linger = nil
				if !b.sending {
					s.sendPending(b)
				}
				b.mu.Unlock()
			})
		}
		b.mu.Unlock()
		return
	}
	if b.linger != nil && b.linger.Stop() {
		b.linger = nil
		b.timers.Done()
	}
	s.sendPending(b)
	b.mu.Unlock()
}

// sendPending sends every exit waiting in b, b.mu held (and let go
// while each frame is sent).
func (s *session) sendPending(b *exitBatch) {
	b.sending = true
	for len(b.pending) > 0 {
		batch, rest := cutExits(b.pending)
		b.pending = rest
		b.mu.Unlock()
		if len(batch) == 1 {
			_ = s.conn.Send(wire.KindExit, batch[0])
		} else {
			_ = s.conn.Send(wire.KindExit, batch)
		}
		b.mu.Lock()
	}
	b.sending = false
}

// flushed returns once every exit given to sendExit has been sent, when
// called after every rank's waiter has returned: a waiter returns only
// once what it queued is sent, or is being sent by another sender, which
// is a waiter or the linger's callback; so waiting for the callback is
// all that is left.
func (b *exitBatch) flushed() {
	b.timers.Wait()
}

// pendingSize bounds the JSON of xs (exitSize).
func pendingSize(xs []wire.Exit) int {
	n := 0
	for _, x := range xs {
		n += exitSize(x)
	}
	return n
}

// cutExits splits xs into the first frame's exits, at most
// wire.MaxExitBatch bytes of them (one, whatever its size), and the rest.
func cutExits(xs []wire.Exit) (batch, rest []wire.Exit) {
	n, size := 0, 0
	for n < len(xs) {
		size += exitSize(xs[n])
		if n > 0 && size > wire.MaxExitBatch {
			break
		}
		n++
	}
	return xs[:n:n], xs[n:]
}

// exitSize bounds what x takes in JSON: its texts as if every byte were
// escaped (\u00XX) and the rest.
func exitSize(x wire.Exit) int {
	return 6*(len(x.ErrorFile)+len(x.Err)+len(x.SignalName)) + 160
}

// outputLost counts a piece of rank output the launcher was not sent and
// says so at the first: a broken session refuses every frame after it,
// so the rest are counted (lostOutputSummary says how many at the
// session's end), not logged one by one.
func (s *session) outputLost(rank int, err error) {
	if s.lostOutput.Add(1) == 1 {
		s.log.Warn("rank output not sent to the launcher; later pieces that fail are counted", zap.Int("rank", rank), zap.Error(err))
	}
}

// lostOutputSummary says how many pieces of rank output were not sent,
// when more than the first (which outputLost logged).
func (s *session) lostOutputSummary() {
	if n := s.lostOutput.Load(); n > 1 {
		s.log.Warn("rank output not sent to the launcher", zap.Int64("pieces", n))
	}
}
