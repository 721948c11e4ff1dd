package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/account"
	"github.com/gangway-hpc/gangway/agent/pmi"
	"github.com/gangway-hpc/gangway/agent/proc"
	"github.com/gangway-hpc/gangway/agent/relay"
	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/textx"
)

// session is one launcher's job on this host.
type session struct {
	capture    capture        // ranks' stderr while a dump waits for their stacks
	errMu      sync.Mutex     // guards errorFiles, errorRoot and errorDir (spawn holds mu while it fills them)
	errorRoot  string         // the job's directory of error files, once made (os.DevNull: could not be)
	errorDir   string         // where the ranks' error files are: errorRoot or a directory of the ranks' user in it
	errorFiles map[int]string // rank -> TORCHELASTIC_ERROR_FILE
	batchExits bool           // the launcher takes exits that waited together as one frame (Hello.BatchExits)
	gather     bool           // the launcher takes a relay's gathered answers (Hello.Gather)
	fenceSpans bool           // the launcher takes this relay's Fences as spans (Hello.FenceSpans)
	ends       bool           // the launcher takes Ends in place of successful exits and Done (Hello.Ends)
	exits      exitBatch      // exits waiting while one is sent
	lostOutput atomic.Int64   // pieces of rank output the launcher was not sent (outputLost)
	dumpBusy   atomic.Bool    // a dump is collecting: one asked meanwhile is answered at once, empty
	dumping    sync.Mutex     // held by a dump until its answer is sent: Done waits for it
	a          *Agent
	login      account.Login
	heard      func() // every message from the launcher feeds the watchdog
	conn       *wire.Conn
	log        *zap.Logger
	jobID      string
	facts      wire.Facts

	mu      sync.Mutex
	shared  *wire.StartJob // the job's shared start (KindJob), once it came
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

	relay atomic.Pointer[relay.Relay] // this host's children in the agent tree, from the first RelayKey

	stdin chan stdinChunk

	smu      sync.Mutex         // guards sink and stopSend
	sink     *sink              // the fabric self-test's sink, while it is open
	stopSend context.CancelFunc // ends the self-test send running, if any
	sending  sync.Mutex         // held while a self-test send runs
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

// answer sends this host's answer v of kind k, or gives it to its relay
// (rl, nil when it is none) to go up with its subtree's (relay.Begin).
func (s *session) answer(rl *relay.Relay, k wire.Kind, v any) error {
	if rl != nil {
		if taken, err := rl.OwnAnswer(k, v); taken || err != nil {
			return err
		}
	}
	return s.conn.Send(k, v)
}

// handle acts on one message from the launcher; an error ends the
// session (the launcher is told why).
func (s *session) handle(ctx context.Context, m wire.Msg) error {
	switch m.Kind {
	case wire.KindStart:
		j, err := decode[wire.StartJob](m)
		if err != nil {
			return err
		}
		rl := s.relay.Load()
		if rl != nil {
			rl.Begin(wire.KindReady) // the children's starts come next
		}
		r := wire.Ready{}
		if err := s.prepare(ctx, &j); err != nil {
			r.Err = err.Error()
		} else {
			s.auditJob(&j)
			if rl != nil {
				rl.OwnJob(len(j.Ranks) > 0)
			}
		}
		return s.answer(rl, wire.KindReady, r)
	case wire.KindJob:
		sh, err := decode[wire.StartJob](m)
		if err != nil {
			return err
		}
		if err := sh.CheckShared(); err != nil {
			return err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.shared != nil || s.job != nil {
			return errors.New("a second job frame, or one after the start")
		}
		s.shared = &sh
	case wire.KindGo:
		if rl := s.relay.Load(); rl != nil {
			rl.Begin(wire.KindStarted) // the children have theirs (spread)
			rl.OwnGo()
		}
		return s.spawn(ctx)
	case wire.KindPing:
		// The launcher's heartbeat: its arrival is all that counts.
	case wire.KindDump:
		d, err := decode[wire.Dump](m)
		if err != nil {
			return err
		}
		return s.startDump(ctx, d)
	case wire.KindStdin:
		rank, data, err := m.Stdin()
		if err != nil {
			return err
		}
		s.queueStdin(rank, data)
	case wire.KindSignal:
		sig, err := decode[wire.Signal](m)
		if err != nil {
			return err
		}
		return s.signalAll(sig.Name)
	case wire.KindStop:
		st, err := decode[wire.Stop](m)
		if err != nil {
			return err
		}
		if r := s.relay.Load(); r != nil {
			r.Stopped() // the subtree's ends go up within the stop's bounds
		}
		s.stopAll(st.Grace)
	case wire.KindFenceDone:
		fd, err := decode[wire.FenceDone](m)
		if err != nil {
			return err
		}
		s.fenceDone(fd)
	case wire.KindNameReply:
		r, err := decode[wire.NameReply](m)
		if err != nil {
			return err
		}
		s.names.answer(r)
	case wire.KindPrepare:
		p, err := decode[wire.Prepare](m)
		if err != nil {
			return err
		}
		return s.conn.Send(wire.KindPrepared, s.a.prepareNode(p, s.login))
	case wire.KindProbe:
		p, err := decode[wire.Probe](m)
		if err != nil {
			return err
		}
		rl := s.relay.Load()
		if rl != nil {
			rl.Begin(wire.KindProbeResult)
		}
		// Dialing peers takes up to the probe's timeout: off the loop, so
		// Stop and signals are still handled meanwhile.
		s.waiters.Go(func() { _ = s.answer(rl, wire.KindProbeResult, probe(ctx, p)) })
	case wire.KindRelay:
		r := s.relay.Load()
		if r == nil {
			return errors.New("a frame to relay before the relay's key")
		}
		return r.Forward(m)
	case wire.KindSpread:
		inner, err := m.Spread()
		if err != nil {
			return err
		}
		if r := s.relay.Load(); r != nil {
			r.Spread(m)
		}
		return s.handle(ctx, inner)
	case wire.KindRelayKey:
		k, err := decode[wire.RelayKey](m)
		if err != nil {
			return err
		}
		r := s.relay.Load()
		if r == nil {
			r = relay.New(ctx, s.conn, s.log.Named("relay"))
			r.SetGather(s.gather)
			r.SetFenceSpans(s.fenceSpans)
			r.SetEnds(s.ends)
			s.relay.Store(r)
		}
		return r.SetKey(k)
	case wire.KindLink:
		l, err := decode[wire.Link](m)
		if err != nil {
			return err
		}
		r := s.relay.Load()
		if r == nil {
			return errors.New("link before the relay's key")
		}
		return r.Link(l)
	case wire.KindUnlink:
		u, err := decode[wire.Unlink](m)
		if err != nil {
			return err
		}
		if r := s.relay.Load(); r != nil {
			r.Unlink(u.Host)
		}
	case wire.KindSelftest:
		st, err := decode[wire.Selftest](m)
		if err != nil {
			return err
		}
		if err := st.Validate(); err != nil {
			return err
		}
		return s.selftest(ctx, st)
	default:
		return fmt.Errorf("unexpected message %s", m.Kind)
	}
	return nil
}

// decode decodes m's payload as a T.
func decode[T any](m wire.Msg) (T, error) {
	var v T
	err := m.Decode(&v)
	return v, err
}

// startDump starts collecting the stacks of every local rank (Dump).
// gdb takes seconds: off the loop, so Stop still works meanwhile. The
// dump holds dumping until its answer is sent, and Done waits for it,
// so that the stacks reach the launcher first. The launcher asks for
// one dump at a time; one asked while another collects (dumpBusy) is
// answered at once, empty. A dump is no longer busy once its stacks are
// collected, before its answer goes: the launcher may ask the next as
// soon as it has the answer, and that one waits here only for the
// answer's send to end. The dump ends, answering with what it has,
// before the launcher stops waiting (d.Within), or when it stops the job
// (Stop), or when the session ends.
func (s *session) startDump(ctx context.Context, d wire.Dump) error {
	if !s.dumpBusy.CompareAndSwap(false, true) {
		return s.conn.Send(wire.KindDumped, wire.Dumped{})
	}
	s.dumping.Lock()
	dctx, cancel := context.WithTimeout(ctx, dumpBudget(d.Within))
	s.mu.Lock()
	s.endDump = cancel
	s.mu.Unlock()
	s.waiters.Go(func() {
		defer s.dumping.Unlock()
		defer cancel()
		out := s.dump(dctx, d)
		s.dumpBusy.Store(false)
		_ = s.conn.Send(wire.KindDumped, out)
	})
	return nil
}

// queueStdin hands a chunk of a rank's stdin (empty: EOF) to the
// writer. The launcher sends one chunk at a time and waits for the ack,
// so this never blocks the loop that must keep handling Stop.
func (s *session) queueStdin(rank int, data []byte) {
	select {
	case s.stdin <- stdinChunk{rank, data}:
	default:
		s.log.Warn("stdin chunk beyond the window dropped", zap.Int("rank", rank))
	}
}

// signalAll sends the signal named name (checked against proc's
// allowlist) to every rank's process group.
func (s *session) signalAll(name string) error {
	n, err := proc.ParseSignal(name)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		_ = p.Signal(n)
	}
	return nil
}

// fenceDone releases a barrier the launcher has completed (FenceDone)
// with the job's puts.
func (s *session) fenceDone(fd wire.FenceDone) {
	s.fmu.Lock()
	done := s.fences[fd.Seq]
	delete(s.fences, fd.Seq)
	s.fmu.Unlock()
	if done != nil {
		// Releases the local ranks from here: the PMI server's replies
		// do not wait, so no goroutine sits between the launcher's
		// answer and the ranks.
		done(fd.Puts, nil)
	}
}

// prepare readies every local rank without starting any: PMI sockets and
// environments, from the whole form of j (a compact one is expanded
// first: StartJob.Expand). Nothing runs until Go.
func (s *session) prepare(ctx context.Context, j *wire.StartJob) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.job != nil {
		return errors.New("this session already has a job")
	}
	if err := j.WithShared(s.shared); err != nil {
		return err
	}
	s.shared = nil // now j's
	if err := j.Expand(); err != nil {
		return err
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
	var err error
	if r := s.relay.Load(); r != nil {
		var combined bool
		if combined, err = r.OwnFence(seq, puts); combined && err == nil {
			return // goes up in the subtree's Fences
		}
	}
	if err == nil {
		err = s.conn.Send(wire.KindFence, wire.Fence{Seq: seq, Puts: puts})
	}
	if err != nil {
		// The local ranks' barrier fails (PMI-1 ranks see their
		// connection close): the agent's log says why.
		s.log.Warn("barrier failed", zap.Int("seq", seq), zap.Error(err))
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
