package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"gangway/agent/account"
	"gangway/agent/pmi"
	"gangway/agent/proc"
	"gangway/agent/wire"
	"gangway/internal/textx"
)

// session is one launcher's job on this host.
type session struct {
	capture    capture        // ranks' stderr while a dump waits for their stacks
	errMu      sync.Mutex     // guards errorFiles, errorRoot and errorDir (spawn holds mu while it fills them)
	errorRoot  string         // the job's directory of error files, once made (os.DevNull: could not be)
	errorDir   string         // where the ranks' error files are: errorRoot or a directory of the ranks' user in it
	errorFiles map[int]string // rank -> TORCHELASTIC_ERROR_FILE
	dumping    sync.Mutex     // held while a dump runs
	a          *Agent
	login      account.Login
	heard      func() // every message from the launcher feeds the watchdog
	conn       *wire.Conn
	log        *zap.Logger
	jobID      string
	facts      wire.Facts

	mu      sync.Mutex
	job     *wire.StartJob
	release func() // gives back the job's place under its user's limit
	procs   map[int]*proc.Proc
	pmi     *pmi.Server
	pmiFDs  map[int]*os.File
	pmiEnv  map[int][]string
	waiters sync.WaitGroup
	endDump context.CancelFunc // ends the last dump; nil before the first

	fmu    sync.Mutex
	fences map[int]func(map[string]string, error) // seq -> the PMI server's done, until FenceDone

	names *launcherNames // the job's PMI name service, at the launcher

	stdin chan stdinChunk
}

type stdinChunk struct {
	rank int
	data []byte // empty: EOF
}

// stdinWriter writes stdin chunks into the rank's pipe, acking each, so a
// rank that never reads its stdin blocks only this goroutine.
func (s *session) stdinWriter(ctx context.Context) {
	for {
		select {
		case c := <-s.stdin:
			s.mu.Lock()
			p := s.procs[c.rank]
			s.mu.Unlock()
			if p != nil && p.Stdin() != nil {
				if len(c.data) == 0 {
					p.Stdin().Close()
				} else if _, err := p.Stdin().Write(c.data); err != nil {
					s.log.Debug("stdin write", zap.Int("rank", c.rank), zap.Error(err))
				}
			}
			_ = s.conn.Send(wire.KindStdinAck, nil)
		case <-ctx.Done():
			return
		}
	}
}

func (s *session) loop(ctx context.Context) error {
	for {
		m, err := s.conn.Recv()
		s.heard()
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("launcher connection: %w", err)
		}
		if err := s.handle(ctx, m); err != nil {
			_ = s.conn.Send(wire.KindError, wire.Error{Msg: err.Error()})
			return err
		}
	}
}

func (s *session) handle(ctx context.Context, m wire.Msg) error {
	switch m.Kind {
	case wire.KindStart:
		var j wire.StartJob
		if err := m.Decode(&j); err != nil {
			return err
		}
		err := s.prepare(ctx, &j)
		r := wire.Ready{}
		if err != nil {
			r.Err = err.Error()
		} else {
			s.auditJob(&j)
		}
		return s.conn.Send(wire.KindReady, r)
	case wire.KindGo:
		return s.spawn(ctx)
	case wire.KindPing:
		// The launcher's heartbeat: its arrival is all that counts.
	case wire.KindDump:
		var d wire.Dump
		if err := m.Decode(&d); err != nil {
			return err
		}
		// gdb takes seconds: off the loop, so Stop still works meanwhile.
		// The dump holds dumping until its answer is sent, and Done waits
		// for it, so that the stacks reach the launcher first. The
		// launcher asks for one dump at a time.
		// The dump ends, answering with what it has, before the launcher
		// stops waiting (d.Within), or when it stops the job (Stop), or
		// when the session ends.
		if !s.dumping.TryLock() {
			return s.conn.Send(wire.KindDumped, wire.Dumped{})
		}
		dctx, cancel := context.WithTimeout(ctx, dumpBudget(d.Within))
		s.mu.Lock()
		s.endDump = cancel
		s.mu.Unlock()
		s.waiters.Go(func() {
			defer s.dumping.Unlock()
			defer cancel()
			_ = s.conn.Send(wire.KindDumped, s.dump(dctx, d))
		})
	case wire.KindStdin:
		rank, data, err := m.Stdin()
		if err != nil {
			return err
		}
		// The launcher sends one chunk at a time and waits for the ack, so
		// this never blocks the loop that must keep handling Stop.
		select {
		case s.stdin <- stdinChunk{rank, data}:
		default:
			s.log.Warn("stdin chunk beyond the window dropped", zap.Int("rank", rank))
		}
	case wire.KindSignal:
		var sig wire.Signal
		if err := m.Decode(&sig); err != nil {
			return err
		}
		n, err := proc.ParseSignal(sig.Name)
		if err != nil {
			return err
		}
		s.mu.Lock()
		for _, p := range s.procs {
			_ = p.Signal(n)
		}
		s.mu.Unlock()
	case wire.KindStop:
		var st wire.Stop
		if err := m.Decode(&st); err != nil {
			return err
		}
		s.stopAll(st.Grace)
	case wire.KindFenceDone:
		var fd wire.FenceDone
		if err := m.Decode(&fd); err != nil {
			return err
		}
		s.fmu.Lock()
		done := s.fences[fd.Seq]
		delete(s.fences, fd.Seq)
		s.fmu.Unlock()
		if done != nil {
			// Releases the local ranks from here: the PMI server's
			// replies do not wait, so no goroutine sits between the
			// launcher's answer and the ranks.
			done(fd.Puts, nil)
		}
	case wire.KindNameReply:
		var r wire.NameReply
		if err := m.Decode(&r); err != nil {
			return err
		}
		s.names.answer(r)
	case wire.KindPrepare:
		var p wire.Prepare
		if err := m.Decode(&p); err != nil {
			return err
		}
		return s.conn.Send(wire.KindPrepared, s.a.prepareNode(p, s.login))
	case wire.KindProbe:
		var p wire.Probe
		if err := m.Decode(&p); err != nil {
			return err
		}
		// Dialing peers takes up to the probe's timeout: off the loop, so
		// Stop and signals are still handled meanwhile.
		s.waiters.Go(func() { _ = s.conn.Send(wire.KindProbeResult, probe(ctx, p)) })
	default:
		return fmt.Errorf("unexpected message %s", m.Kind)
	}
	return nil
}

// prepare readies every local rank without starting any: PMI sockets and
// environments. Nothing runs until Go.
func (s *session) prepare(ctx context.Context, j *wire.StartJob) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.job != nil {
		return errors.New("this session already has a job")
	}
	if err := validateStartJob(*j, s.facts, allowedCPUs()); err != nil {
		return err
	}
	checked := map[string]bool{}
	for _, r := range j.Ranks {
		if r.Dir == "" || checked[r.Dir] {
			continue
		}
		checked[r.Dir] = true
		a := s.login.Account
		err := a.Enter(r.Dir)
		switch {
		case err == nil:
		case a.Credential() != nil && errors.Is(err, fs.ErrPermission):
			return fmt.Errorf("rank %d: working directory %s: not accessible to user %s (%v); give -wdir a directory %s can reach", r.Rank, short(r.Dir), a.Name, err, a.Name)
		default:
			return fmt.Errorf("rank %d: working directory %s: %v on this host", r.Rank, short(r.Dir), err)
		}
	}
	if take := s.login.TakeJob; take != nil {
		release, err := take()
		if err != nil {
			return err
		}
		s.release = release
	}
	s.job = j
	if j.PMI != nil && len(j.Ranks) > 0 {
		local := make([]int, len(j.Ranks))
		for i, r := range j.Ranks {
			local[i] = r.Rank
		}
		var fencer pmi.Fencer
		if len(local) < j.PMI.Size {
			fencer = sessionFencer{s}
		}
		pj := pmi.Job{KVSName: j.PMI.KVSName, Size: j.PMI.Size, Mapping: j.PMI.Mapping, JobID: j.JobID, UniverseSize: j.PMI.UniverseSize, Limits: s.a.PMILimits}
		srv, err := pmi.NewServer(ctx, pj, local, fencer, pmi.Events{
			Abort: func(rank, code int, msg string) {
				_ = s.conn.Send(wire.KindAbort, wire.Abort{Rank: rank, Code: code, Msg: msg})
			},
			Fail:  s.pmiFailed,
			Names: s.names,
		})
		if err != nil {
			return fmt.Errorf("PMI server: %w", err)
		}
		s.pmi = srv
		s.pmiFDs = map[int]*os.File{}
		s.pmiEnv = map[int][]string{}
		for _, r := range j.Ranks {
			f, err := srv.RankFD(r.Rank)
			if err != nil {
				return fmt.Errorf("rank %d: PMI socket: %w", r.Rank, err)
			}
			env, err := srv.Env(r.Rank, 3)
			if err != nil {
				return fmt.Errorf("rank %d: PMI env: %w", r.Rank, err)
			}
			s.pmiFDs[r.Rank], s.pmiEnv[r.Rank] = f, env
		}
	}
	return nil
}

// pmiFailed stops a rank whose PMI connection the server dropped; its
// Exit then carries the server's reason (pmi.Server.Failed), so the
// launcher blames it and stops the job, as Hydra kills a job whose rank's
// PMI socket closes early. A PMI server's connections exist only once
// spawn has run, so procs is set.
func (s *session) pmiFailed(rank int, err error) {
	s.log.Warn("PMI connection dropped; stopping the rank", zap.Int("rank", rank), zap.Error(err))
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.procs[rank]; p != nil {
		p.Stop(0)
	}
}

// sessionFencer carries the PMI server's barriers to the launcher.
type sessionFencer struct{ s *session }

var _ pmi.AsyncFencer = sessionFencer{}

// FenceAsync forwards a completed local barrier to the launcher; the
// session loop calls done with FenceDone's puts. The loop's end fails the
// barriers still open (failFences).
func (f sessionFencer) FenceAsync(seq int, puts map[string]string, done func(map[string]string, error)) {
	s := f.s
	s.fmu.Lock()
	if s.fences == nil {
		s.fmu.Unlock()
		done(nil, errSessionOver)
		return
	}
	s.fences[seq] = done
	s.fmu.Unlock()
	if err := s.conn.Send(wire.KindFence, wire.Fence{Seq: seq, Puts: puts}); err != nil {
		s.fmu.Lock()
		d := s.fences[seq]
		delete(s.fences, seq)
		s.fmu.Unlock()
		if d != nil {
			d(nil, err)
		}
	}
}

// Fence is FenceAsync, waiting for its answer.
func (f sessionFencer) Fence(ctx context.Context, seq int, puts map[string]string) (map[string]string, error) {
	type answer struct {
		all map[string]string
		err error
	}
	ch := make(chan answer, 1)
	f.FenceAsync(seq, puts, func(all map[string]string, err error) { ch <- answer{all, err} })
	select {
	case a := <-ch:
		return a.all, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// errSessionOver fails the barriers open when the launcher's session ends.
var errSessionOver = errors.New("the launcher's session ended")

// failFences fails every barrier still waiting for the launcher, and any
// later one, once the session loop (the only reader of FenceDone) ended.
func (s *session) failFences() {
	s.fmu.Lock()
	open := s.fences
	s.fences = nil
	s.fmu.Unlock()
	for _, done := range open {
		done(nil, errSessionOver)
	}
}

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
	base := s.a.baseEnv()
	pids := map[int]int{}
	bindings := map[int]string{}
	binder := s.a.binder(allowedCPUs())
	sink := func(rank int, st proc.Stream, data []byte) {
		s.capture.add(rank, st, data)
		_ = s.conn.SendOutput(rank, wire.Stream(st), data)
	}
	cg := s.a.jobCgroup(s.log, s.jobID)
	var all sync.WaitGroup
	var specs []proc.Spec
	for _, r := range j.Ranks {
		env := rankEnv(base, s.login.Account, s.errorFile(r), r, s.pmiEnv[r.Rank])
		spec := proc.Spec{Rank: r.Rank, Argv: r.Argv, Env: env, Dir: r.Dir, Stdin: r.Rank == j.StdinRank, Grace: j.KillGrace,
			Supervisor: s.a.Supervisor, Cgroup: cg, Credential: s.login.Account.Credential()}
		if f := s.pmiFDs[r.Rank]; f != nil {
			spec.ExtraFiles = []*os.File{f}
		}
		cpus, err := binder.bind(j.Bind, r, s.facts)
		if err != nil {
			_ = s.conn.Send(wire.KindExit, wire.Exit{Rank: r.Rank, Code: 1, Err: "-bind-to " + j.Bind + ": " + err.Error()})
			continue
		}
		spec.CPUs = cpus
		if cpus != nil {
			bindings[r.Rank] = FormatCPUList(cpus)
		}
		specs = append(specs, spec)
	}
	// One supervisor for all of this host's ranks: one re-execution of the
	// agent per job, not per rank.
	var procs []*proc.Proc
	var errs []error
	if s.a.Supervisor != "" {
		procs, errs = proc.StartGroup(ctx, specs, sink)
	} else {
		procs, errs = make([]*proc.Proc, len(specs)), make([]error, len(specs))
		for i, spec := range specs {
			procs[i], errs[i] = proc.Start(ctx, spec, sink)
		}
	}
	// The programs (or their supervisor) have their own copies.
	for _, f := range s.pmiFDs {
		f.Close()
	}
	for i, p := range procs {
		rank := specs[i].Rank
		if err := errs[i]; err != nil {
			res := proc.StartResult(rank, err)
			_ = s.conn.Send(wire.KindExit, wire.Exit{Rank: rank, Code: res.Code, Err: err.Error()})
			continue
		}
		s.procs[rank] = p
		all.Add(1)
		s.waiters.Go(func() {
			defer all.Done()
			res := p.Wait()
			x := wire.Exit{Rank: res.Rank, Pid: res.Pid, Code: res.Code, Signal: int(res.Signal), SignalName: proc.SignalName(res.Signal), Stopped: res.Stopped || s.endedByDump(res.Rank)}
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
				// A supervised program that could not start: a failure of
				// its own, even when a stop reached its supervisor.
				x.Err, x.Stopped = res.Err.Error(), false
			}
			if x.Code != 0 {
				x.ErrorFile = s.readErrorFile(res.Rank)
			}
			_ = s.conn.Send(wire.KindExit, x)
		})
	}
	// After every start: a supervised rank's pid is known once its
	// supervisor has started the program, and supervisors start together.
	for rank, p := range s.procs {
		pids[rank] = p.Pid()
	}
	err := s.conn.Send(wire.KindStarted, wire.Started{Pids: pids, Bindings: bindings})
	s.log.Debug("ranks started", zap.Int("ranks", len(pids)))
	s.waiters.Go(func() {
		all.Wait()
		// Every rank's Exit, and with it its error file, has been sent:
		// the files go now, not at the session's end, which an agent
		// killed once the job is over (a Slurm step's end) never reaches.
		s.removeErrorFiles()
		if s.pmi != nil {
			s.pmi.Close()
		}
		if cg != nil {
			// Whatever escaped the ranks' supervisors dies with the job.
			if err := cg.Close(cgroupCloseTimeout); err != nil {
				s.log.Warn("job cgroup", zap.Error(err))
			}
		}
		if err == nil {
			s.dumping.Lock() // stacks being collected go first
			_ = s.conn.Send(wire.KindDone, nil)
			s.dumping.Unlock()
		}
		if s.pmi != nil && s.pmi.Held() > freeOSMemoryAbove {
			// The job's PMI keys (up to pmi.Limits' bytes) are garbage
			// now: give the memory back to the host at once, not when
			// the runtime gets round to it, so that an idle agent shows
			// what it holds. A full collection costs a millisecond or
			// more, so only after a job that kept much, and after Done.
			debug.FreeOSMemory()
		}
	})
	return err
}

// freeOSMemoryAbove is how many bytes of PMI keys a job must have kept
// for its end to return the agent's free memory to the host at once.
const freeOSMemoryAbove = 4 << 20

// auditJob logs a job this host is about to run: its program and ranks.
func (s *session) auditJob(j *wire.StartJob) {
	program := ""
	ranks := make([]int, 0, len(j.Ranks))
	for _, r := range j.Ranks {
		if program == "" && len(r.Argv) > 0 {
			program = r.Argv[0]
		}
		ranks = append(ranks, r.Rank)
	}
	sort.Ints(ranks)
	s.log.Info("job", zap.String("program", textx.Clip(program)), zap.Int("nranks", len(ranks)), zap.String("ranks", textx.Clip(FormatCPUList(ranks))))
}

// stopAll stops every rank, and ends a dump still collecting stacks:
// the launcher waits for them no more.
func (s *session) stopAll(grace time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.endDump != nil {
		s.endDump()
	}
	procs := make([]*proc.Proc, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	proc.StopAll(procs, grace)
	if s.procs == nil {
		// Prepared but never started: release what prepare made.
		for _, f := range s.pmiFDs {
			f.Close()
		}
		s.pmiFDs = nil
		if s.pmi != nil {
			s.pmi.Close()
		}
	}
}

func (s *session) wait() { s.waiters.Wait() }

// hasJob reports whether the session has been given its job.
func (s *session) hasJob() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.job != nil
}

// releaseJob gives back the job's place under its user's limit, once
// every rank (and so its supervisor) is gone.
func (s *session) releaseJob() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.release != nil {
		s.release()
		s.release = nil
	}
}
