// Package agent is the agent's launcher session: an Agent serves one
// launcher's job on this host (ServeSession, ServeLogin) over the wire
// protocol. It answers Hello with the host's facts, checks and prepares
// the job (working directories, PMI sockets, CPU bindings), starts its
// ranks under supervisors and a job cgroup with what rankEnv (env.go)
// adds to their environment, carries their output, exits, PMI barriers
// and names to the launcher, collects hung ranks' stacks and torchrun's
// error files, and stops every rank when the launcher says so, falls
// silent, or goes away.
//
// The SSH server that logs users in and hands an Agent its sessions
// (agent/sshd) is a room of its own: agent must not import agent/sshd,
// nor agent/sshd agent; the accounts and logins both speak of are in
// agent/account, and cmd/agent wires the server to the Agent. Besides
// agent/account it imports agent/wire, agent/proc, agent/pmi, agent/facts
// and internal/... only (.ci/check-imports.sh).
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/account"
	"github.com/gangway-hpc/gangway/agent/facts"
	"github.com/gangway-hpc/gangway/agent/pmi"
	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/netchoice"
	"github.com/gangway-hpc/gangway/internal/textx"
)

// LostGrace is how long ranks get between SIGTERM and SIGKILL when the
// launcher's connection drops.
const LostGrace = 2 * time.Second

// StoppedError is the cause the agent's context ends with when the agent
// itself is told to stop (a signal: systemctl stop, docker stop, a
// Ctrl-C): each launcher session tells its launcher so before it closes,
// and the launcher says why it lost the host, not only that its
// connection closed.
type StoppedError struct{ Signal string }

func (e StoppedError) Error() string {
	return fmt.Sprintf("the agent was stopped (%s); its ranks are stopped", e.Signal)
}

// Agent serves launcher sessions. The zero value is not usable; set Log.
type Agent struct {
	Name    string // reported name; default hostname
	Version string
	Log     *zap.Logger
	// Facts configures discovery (tests inject fixtures).
	Facts facts.Options
	// AllowDropCaches lets launchers ask for a page-cache drop.
	AllowDropCaches bool
	// BaseEnv is the environment ranks start from; nil means os.Environ().
	BaseEnv []string
	// LauncherTimeout ends a session, and stops its ranks, when nothing
	// has come from its launcher for this long (the launcher sends a Ping
	// every few seconds): a stopped launcher or a silent network partition
	// does not hold the job forever. 0 disables it.
	LauncherTimeout time.Duration
	// Supervisor is the binary re-executed as each job's supervisor
	// (proc.SupervisorExecutable()), so that what a rank starts dies even
	// when the agent is killed; "" starts ranks directly.
	Supervisor string
	// ProbePort, when not 0, is reported in Facts.ProbePort: a listener
	// the agent's owner runs that other hosts' preflight probes may dial.
	ProbePort int
	// NoCgroup keeps ranks out of cgroup2; otherwise each job gets a group
	// under the agent's own where cgroup2 is writable (README, Containment).
	NoCgroup bool
	// PMILimits bound what each job's PMI server keeps and how long a
	// reply waits for its rank; zero fields take pmi's defaults.
	PMILimits pmi.Limits
	// StartJobTimeout closes a launcher session that has not sent its
	// job (StartJob) this long after its Hello, with an error naming the
	// limit; 0 means no deadline.
	StartJobTimeout time.Duration

	mu   sync.Mutex
	jobs map[string]map[string]int // job id -> host name (Hello.Host) -> live sessions
	// smi runs nvidia-smi, remembering answers for a minute: GPUs do not
	// change between jobs, and nvidia-smi is slow on big servers.
	smi func(ctx context.Context, args ...string) ([]byte, error)
	// contain is where job cgroups are made (cgroupParent).
	contain containment
	// errSweep removes dead agents' error-file directories, once.
	errSweep sync.Once
	// exitLinger replaces the const exitLinger when set (tests).
	exitLinger time.Duration
	// rankEnded, when set (tests), is called with each rank's number
	// once its end is taken: a Stop after it no longer claims the rank.
	rankEnded func(rank int)
}

// ErrVersion is returned when the launcher speaks another protocol version.
var ErrVersion = errors.New("protocol version mismatch")

// DefaultLauncherTimeout is the agent's default LauncherTimeout: six
// missed heartbeats.
const DefaultLauncherTimeout = 30 * time.Second

// DefaultStartJobTimeout is the agent's StartJobTimeout. A launcher
// sends its job once every host has answered (within its
// --start-timeout, 60 s by default), page caches are dropped (it waits
// up to 5 minutes for that, with --drop-caches) and the preflight is done
// (up to 30 s): 6.5 minutes with the launcher's defaults, and 10
// leave room beyond that.
const DefaultStartJobTimeout = 10 * time.Minute

// ErrNoJob ends a session whose launcher sent no job within the agent's
// StartJobTimeout.
var ErrNoJob = errors.New("no job within the start-job timeout")

// ErrLauncherSilent ends a session whose launcher sent nothing for the
// agent's LauncherTimeout.
var ErrLauncherSilent = errors.New("no word from the launcher within the launcher timeout")

// watchdog calls bark once when heard has not been called for timeout.
type watchdog struct {
	last atomic.Int64 // unix nanoseconds of the last message
	quit chan struct{}
	wg   sync.WaitGroup
}

func newWatchdog(timeout time.Duration, bark func()) *watchdog {
	w := &watchdog{quit: make(chan struct{})}
	w.heard()
	w.wg.Go(func() {
		t := time.NewTicker(max(timeout/10, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-w.quit:
				return
			case now := <-t.C:
				if now.Sub(time.Unix(0, w.last.Load())) > timeout {
					bark()
					return
				}
			}
		}
	})
	return w
}

func (w *watchdog) heard() { w.last.Store(time.Now().UnixNano()) }

func (w *watchdog) stop() {
	close(w.quit)
	w.wg.Wait()
}

// ServeSession serves one launcher session on rwc as the agent's own
// user (ServeLogin with the zero account.Login).
func (a *Agent) ServeSession(ctx context.Context, rwc io.ReadWriteCloser) error {
	return a.ServeLogin(ctx, rwc, account.Login{})
}

// ServeLogin serves one launcher session on rwc for login until the
// launcher closes it, the connection drops or ctx ends. Every rank it
// started is dead when it returns.
func (a *Agent) ServeLogin(ctx context.Context, rwc io.ReadWriteCloser, login account.Login) error {
	conn := wire.NewConn(rwc)
	defer conn.Close()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() {
		var se StoppedError
		if errors.As(context.Cause(ctx), &se) {
			sayBounded(conn, wire.Error{Msg: se.Error(), Stopped: true}, wire.LastWords)
		}
		conn.Close()
	})
	defer stop()

	h, f, err := a.hello(ctx, conn, login)
	if err != nil {
		return err
	}
	log := a.Log.With(zap.String("job", textx.Clip(h.JobID)))
	if login.Account != nil {
		log = log.With(zap.String("user", login.Account.Name))
	}
	heard := func() {}
	if a.LauncherTimeout > 0 {
		w := newWatchdog(a.LauncherTimeout, func() {
			log.Warn("no word from the launcher; stopping its ranks", zap.Duration("launcher_timeout", a.LauncherTimeout))
			cancel(ErrLauncherSilent)
		})
		defer w.stop()
		heard = w.heard
	}
	s := &session{heard: heard, a: a, login: login, conn: conn, log: log, jobID: h.JobID, facts: f, fences: map[int]func(map[string]string, error){}, stdin: make(chan stdinChunk, 4), batchExits: h.BatchExits, gather: h.Gather, fenceSpans: h.FenceSpans, ends: h.Ends,
		names: &launcherNames{conn: conn, wait: map[uint64]chan wire.NameReply{}}}
	if other := a.join(h.JobID, h.Host); other != "" {
		err := fmt.Errorf("host entries %q and %q of this launch reach the same agent (the same machine): list each machine once, with all its slots", other, h.Host)
		log.Warn("refusing a second host name for a job", zap.Error(err))
		_ = conn.Send(wire.KindError, wire.Error{Msg: err.Error()})
		return err
	}
	defer a.leave(h.JobID, h.Host)
	if d := a.StartJobTimeout; d > 0 {
		t := time.AfterFunc(d, func() {
			if s.hasJob() {
				return
			}
			msg := fmt.Sprintf("no job within %v of the session's start (the agent's --start-job-timeout); closing the session", d)
			log.Info("closing a launcher session that sent no job", zap.Duration("start_job_timeout", d))
			_ = conn.Send(wire.KindError, wire.Error{Msg: msg})
			cancel(ErrNoJob)
		})
		defer t.Stop()
	}
	var writer sync.WaitGroup
	wctx, wcancel := context.WithCancel(ctx)
	writer.Go(func() { s.stdinWriter(wctx) })
	err = s.loop(ctx)
	wcancel()
	// The children go with their relay: each child's agent stops its own
	// ranks when its session ends, as this one does below.
	if r := s.relay.Load(); r != nil {
		r.Close()
	}
	// Whatever ended the session, no rank outlives it. Stop before waiting
	// for the writer: one blocked on a full pipe returns once its rank dies.
	// The loop, the only caller of spawn, has ended: no rank starts after.
	s.stopAll(LostGrace)
	writer.Wait()
	// No FenceDone can come now; the ranks were stopped first, so none
	// sees its barrier fail.
	s.failFences()
	s.closeSink()
	s.wait()
	s.lostOutputSummary()
	s.removeErrorFiles()
	s.releaseJob()
	return err
}

// sayBounded sends e on conn, waiting at most d for the send: a launcher
// that stopped reading does not hold the agent's stop. The send, if it
// is still blocked, ends when conn is closed; the caller closes it.
func sayBounded(conn *wire.Conn, e wire.Error, d time.Duration) {
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		_ = conn.Send(wire.KindError, e)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-sent:
	case <-t.C:
	}
}

// hello reads the launcher's Hello and answers it with this host's
// facts, or with an Error (another protocol version: ErrVersion; the
// host's discovery failed).
func (a *Agent) hello(ctx context.Context, conn *wire.Conn, login account.Login) (wire.Hello, wire.Facts, error) {
	var h wire.Hello
	m, err := conn.Recv()
	// A ping carries nothing and asks for nothing: a relay of an older
	// build may ping a child before the launcher's Hello for it has
	// come (the launcher was slow to check its host key), and that
	// child is in the job all the same.
	for err == nil && m.Kind == wire.KindPing {
		m, err = conn.Recv()
	}
	if err != nil {
		return h, wire.Facts{}, fmt.Errorf("read hello: %w", err)
	}
	if m.Kind != wire.KindHello {
		return h, wire.Facts{}, fmt.Errorf("expected hello, got %s", m.Kind)
	}
	if err := m.Decode(&h); err != nil {
		return h, wire.Facts{}, err
	}
	if h.Version != wire.Version {
		ve := &wire.VersionError{Ours: wire.Version, Theirs: h.Version}
		_ = conn.Send(wire.KindError, wire.Error{Msg: ve.Error()})
		return h, wire.Facts{}, fmt.Errorf("%w: %w", ErrVersion, ve)
	}
	if err := h.Health.Validate(); err != nil {
		_ = conn.Send(wire.KindError, wire.Error{Msg: err.Error()})
		return h, wire.Facts{}, err
	}
	if login.JobID != "" && h.JobID != login.JobID {
		err := fmt.Errorf("this login's job certificate is for job %.64q, not %.64q", login.JobID, h.JobID)
		_ = conn.Send(wire.KindError, wire.Error{Msg: err.Error()})
		return h, wire.Facts{}, err
	}
	f, err := a.gather(ctx, h.Peers, time.Duration(h.ResolveWaitMS)*time.Millisecond, login)
	if err != nil {
		_ = conn.Send(wire.KindError, wire.Error{Msg: err.Error()})
		return h, f, err
	}
	if h.Health != nil {
		hl := a.checkHealth(ctx, h, f, login)
		f.Health = &hl
	}
	if h.Net != nil {
		f.Net, f.Routes = chooseNet(f, h), nil
	}
	f.FreePort = freePort()
	return h, f, conn.Send(wire.KindFacts, f.Briefed(h)) // the session keeps all
}

// chooseNet is this host's own choice of its data interface, asked for
// by hello.Net: the launcher's rule (netchoice.Choose) over this host's
// facts and its routes to the peers the launcher named, so that a large
// launch's launcher neither receives nor works through every host's
// routes. A host with no usable interface answers why, in the words the
// launcher would have used.
func chooseNet(f wire.Facts, hello wire.Hello) *wire.NetChoice {
	c, err := netchoice.Choose(f.HostNet(hello.Host, hello.Peers), hello.Net.Force...)
	if err != nil {
		return &wire.NetChoice{Err: err.Error()}
	}
	n := &wire.NetChoice{Ifaces: c.Ifaces, Addr: c.Addr, HCAs: c.HCAs, Forced: c.Forced}
	if len(c.Ifaces) > 0 {
		if i := slices.IndexFunc(f.NICs, func(nic wire.NIC) bool { return nic.Name == c.Ifaces[0] }); i >= 0 {
			n.Addrs = f.NICs[i].Addrs // for the launcher's DataAddr, brief facts carrying no interfaces
		}
	}
	return n
}

// join counts a session of job for host (the name the launcher knows
// this agent by), unless the job already has a session here under
// another name: that name is returned, and nothing counted. Two host
// entries of one launch that reach the same agent (dgx01 and
// dgx01.cluster.local, a name and its address) would put two sets of
// local ranks, GPUs 0-7 twice, on one machine.
func (a *Agent) join(job, host string) (other string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for h, n := range a.jobs[job] {
		if h != host && n > 0 {
			return h
		}
	}
	if a.jobs == nil {
		a.jobs = map[string]map[string]int{}
	}
	if a.jobs[job] == nil {
		a.jobs[job] = map[string]int{}
	}
	a.jobs[job][host]++
	return ""
}

// leave undoes join.
func (a *Agent) leave(job, host string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.jobs[job][host]--; a.jobs[job][host] <= 0 {
		delete(a.jobs[job], host)
	}
	if len(a.jobs[job]) == 0 {
		delete(a.jobs, job)
	}
}

// maxResolveWait bounds how long a Hello may have the agent wait for its
// peers' names to resolve (wire.Hello.ResolveWaitMS); the session's end
// ends the wait sooner.
const maxResolveWait = time.Hour

func (a *Agent) gather(ctx context.Context, peers []string, resolveWait time.Duration, login account.Login) (wire.Facts, error) {
	a.mu.Lock()
	if a.smi == nil {
		a.smi = facts.CachedNvidiaSMI(time.Minute, a.Facts.NvidiaSMI)
	}
	smi := a.smi
	a.mu.Unlock()
	o := a.Facts
	o.NvidiaSMI = smi
	if o.Name == "" {
		o.Name = a.Name
	}
	o.Peers, o.ResolveWait = peers, min(resolveWait, maxResolveWait)
	f, err := facts.Gather(ctx, o)
	if err != nil {
		return f, fmt.Errorf("host discovery: %w", err)
	}
	f.Version = wire.Version
	f.Agent = a.Version
	f.CanDropCaches = f.CanDropCaches && a.AllowDropCaches && login.NoDropCaches == ""
	f.Containment = a.containmentFact()
	f.ProbePort = a.ProbePort
	f.Selftest = wire.SelftestVersion
	f.ExpandsStart = true
	f.TakesShared = true
	return f, nil
}

func freePort() int {
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		return 0
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
