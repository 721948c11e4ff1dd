package launcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"gangway/agent/wire"
	"gangway/bench"
	"gangway/hostfile"
	"gangway/nccl"
)

// Deps are what cmd/launcher wires in.
type Deps struct {
	Log    *zap.Logger
	Local  Dialer // the in-process agent, for localhost
	Remote Dialer // SSH to agents; nil: built from the Config
	// NewLocal builds Local once the logger exists (cmd/launcher wires the
	// in-process agent here so this package never imports agent).
	NewLocal func(log *zap.Logger) Dialer
	Stdin    io.Reader
	Stdout   io.Writer
	Stderr   io.Writer
	Signals  <-chan os.Signal
	Version  string
	Cwd      string
}

func newJobID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Run runs the job described by cfg and returns the launcher's exit code.
func Run(ctx context.Context, cfg Config, d Deps) int {
	start := time.Now()
	log := d.Log
	// Until the job loop takes over the signal channel, a signal cancels
	// the set-up (dialing, gang start) and the launcher exits 128+N.
	ctx, setupSig, handOver := watchSetupSignals(ctx, d.Signals)
	jobID := newJobID()
	hosts := cfg.Hosts
	if cfg.HostSource == "local" {
		hosts = []hostfile.Host{{Name: "localhost", Slots: 1}}
	}
	// Plan first (pure) so a bad -np fails before any network traffic;
	// the local default host learns its slot count from its facts.
	var ranks []Rank
	var err error
	if cfg.HostSource != "local" {
		if ranks, err = Plan(hosts, cfg.NP, cfg.planOptions()); err != nil {
			fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
			return ExitUsage
		}
		hosts = usedHosts(hosts, ranks)
	}
	peers := make([]string, len(hosts))
	for i, h := range hosts {
		peers[i] = h.Name
	}
	hello := func(i int) wire.Hello {
		return wire.Hello{Version: wire.Version, Launcher: d.Version, JobID: jobID, Host: hosts[i].Name, Peers: routePeers(peers, i)}
	}
	sessions, err := dialAll(ctx, log, hosts, d.Local, d.Remote, hello, cfg.StartTimeout)
	if err != nil {
		handOver()
		if sig := setupSig(); sig != 0 {
			fmt.Fprintf(d.Stderr, "launcher: interrupted by %v while reaching the hosts; nothing was started\n", sig)
			return 128 + int(sig)
		}
		fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
		return ExitSetup
	}
	closeAll := func() {
		for _, s := range sessions {
			s.conn.Close()
		}
	}
	if cfg.HostSource == "local" {
		f := sessions[0].facts
		hosts[0].Slots = max(f.CPUs, 1)
		if len(f.GPUs) > 0 {
			hosts[0].Slots = len(f.GPUs)
		}
		sessions[0].host = hosts[0]
		if ranks, err = Plan(hosts, cfg.NP, cfg.planOptions()); err != nil {
			closeAll()
			fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
			return ExitUsage
		}
	}
	if cfg.Stdin >= len(ranks) {
		closeAll()
		fmt.Fprintf(d.Stderr, "launcher: --stdin %d: the job has only %d ranks\n", cfg.Stdin, len(ranks))
		return ExitUsage
	}
	choices, err := chooseNetworks(cfg, sessions)
	if err != nil {
		closeAll()
		fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
		return ExitSetup
	}
	envs, gpus, err := buildEnv(cfg, jobID, ranks, sessions, choices)
	if err != nil {
		closeAll()
		fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
		return ExitSetup
	}

	var coll *bench.Collector
	var collDone chan error
	if !cfg.NoSummary || cfg.ReportFile != "" || cfg.PlotFile != "" {
		if coll, err = newCollector(cfg); err != nil {
			closeAll()
			fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
			return ExitUsage
		}
	}
	hostOf := make([]int, len(ranks))
	for _, r := range ranks {
		hostOf[r.Rank] = r.Host
	}
	var obs Observer
	if coll != nil {
		obs = coll
	}
	j := &job{
		cfg: cfg, log: log, sessions: sessions, ranks: ranks, hostOf: hostOf,
		events: make(chan event, 64), stdinAck: make(chan struct{}, 1), exited: map[int]bool{}, done: map[int]bool{},
		fences: map[int]*fence{},
	}
	j.out = newConsole(cfg, d.Stdout, d.Stderr, func(r int) string { return hosts[hostOf[r]].Name }, obs)
	if coll != nil {
		collDone = make(chan error, 1)
		cctx, ccancel := context.WithCancel(context.Background())
		defer ccancel()
		go func() { collDone <- coll.Run(cctx) }()
	}

	var readers sync.WaitGroup
	for _, s := range sessions {
		readers.Go(func() { j.reader(s) })
	}
	finish := func() {
		closeAll()
		readers.Wait()
	}
	// drainEvents keeps readers from blocking while we finish.
	stopDrain := make(chan struct{})
	var drainer sync.WaitGroup
	startDrain := func() {
		drainer.Go(func() {
			for {
				select {
				case <-j.events:
				case <-stopDrain:
					return
				}
			}
		})
	}

	// Gang start: every host prepares its ranks and answers Ready; only
	// then does any rank run.
	err = j.dropCaches(ctx, d.Stderr)
	if err == nil {
		err = j.preflight(ctx, d.Stderr, choices)
	}
	if err == nil {
		err = j.prepare(ctx, cfg, jobID, envs, gpus)
	}
	handOver()
	if sig := setupSig(); err != nil || sig != 0 {
		startDrain()
		finish()
		close(stopDrain)
		drainer.Wait()
		if sig != 0 {
			fmt.Fprintf(d.Stderr, "launcher: interrupted by %v before the ranks started; nothing was started\n", sig)
			return 128 + int(sig)
		}
		fmt.Fprintf(d.Stderr, "launcher: %v; nothing was started\n", err)
		return ExitSetup
	}
	j.broadcast(wire.KindGo, nil)
	var stdinWG sync.WaitGroup
	stdinDone := make(chan struct{})
	if cfg.Stdin >= 0 && cfg.Stdin < len(ranks) && d.Stdin != nil {
		s := sessions[hostOf[cfg.Stdin]]
		stdinWG.Go(func() { forwardStdin(d.Stdin, s.conn, cfg.Stdin, j.stdinAck, stdinDone) })
	}
	j.loop(ctx, d.Signals)
	close(stdinDone)
	startDrain()
	finish()
	close(stopDrain)
	drainer.Wait()
	if f, ok := d.Stdin.(*os.File); ok && f != os.Stdin {
		f.Close()
	}
	waitOrAbandon(&stdinWG, 100*time.Millisecond)
	if err := j.out.close(); err != nil {
		fmt.Fprintf(d.Stderr, "launcher: --output-filename: %v\n", err)
	}
	code := j.report(d.Stderr)
	if coll != nil {
		coll.Close()
		<-collDone
		meta := bench.Meta{Command: cfg.Argv, Ranks: len(ranks), Start: start, End: time.Now(), Version: d.Version}
		for _, s := range sessions {
			meta.Hosts = append(meta.Hosts, s.host.Name)
		}
		if err := writeBench(cfg, coll.Report(meta), d.Stdout); err != nil {
			fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
			if code == 0 {
				code = ExitSetup
			}
		}
	}
	return code
}

// watchSetupSignals cancels ctx on the first signal until handOver is
// called; setupSig then tells which signal, if any, arrived.
func watchSetupSignals(ctx context.Context, sigs <-chan os.Signal) (context.Context, func() syscall.Signal, func()) {
	ctx, cancel := context.WithCancel(ctx)
	var got syscall.Signal
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case s := <-sigs:
			if ss, ok := s.(syscall.Signal); ok {
				got = ss
			} else {
				got = syscall.SIGINT
			}
			cancel()
		case <-stop:
		}
	})
	var once sync.Once
	handOver := func() { once.Do(func() { close(stop); wg.Wait() }) }
	return ctx, func() syscall.Signal { handOver(); return got }, handOver
}

// waitOrAbandon waits for a stdin forwarder blocked on a terminal read at
// most d; a terminal read cannot be interrupted, and the process exits next.
func waitOrAbandon(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// forwardStdin sends the launcher's stdin to one rank, one chunk at a
// time: the next chunk goes only after the agent acked the last, so a rank
// that does not read its stdin holds back the launcher's reads, never the
// agent's control loop.
func forwardStdin(r io.Reader, c *wire.Conn, rank int, ack <-chan struct{}, done <-chan struct{}) {
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if c.SendStdin(rank, buf[:n]) != nil {
				return
			}
			select {
			case <-ack:
			case <-done:
				return
			}
		}
		if err != nil {
			_ = c.SendStdin(rank, nil)
			return
		}
	}
}

// prepare sends every host its ranks and waits until all are Ready.
func (j *job) prepare(ctx context.Context, cfg Config, jobID string, envs [][]string, gpus [][]int) error {
	var pmiJob_ *wire.PMIJob
	if cfg.MPI != "none" {
		pmiJob_ = pmiJob(jobID, j.ranks)
	}
	dir := cfg.Dir
	byHost := make([][]Rank, len(j.sessions))
	for _, r := range j.ranks {
		byHost[r.Host] = append(byHost[r.Host], r)
	}
	for i, s := range j.sessions {
		sj := wire.StartJob{JobID: jobID, KillGrace: cfg.KillGrace, StdinRank: cfg.Stdin, PMI: pmiJob_, Bind: cfg.BindTo}
		per := max(cfg.GPUsPer, 1)
		for _, r := range byHost[i] {
			spec := wire.RankSpec{Rank: r.Rank, LocalRank: r.LocalRank, Argv: cfg.Argv, Env: envs[r.Rank], Dir: dir}
			if g := gpus[i]; len(g) >= (r.LocalRank+1)*per {
				spec.GPUs = g[r.LocalRank*per : (r.LocalRank+1)*per]
			}
			sj.Ranks = append(sj.Ranks, spec)
		}
		if err := s.conn.Send(wire.KindStart, sj); err != nil {
			return &HostError{Host: s.host.Name, Err: fmt.Errorf("send job: %w", err)}
		}
	}
	ready := map[int]bool{}
	deadline := time.NewTimer(cfg.StartTimeout)
	defer deadline.Stop()
	for len(ready) < len(j.sessions) {
		select {
		case ev := <-j.events:
			name := j.sessions[ev.host].host.Name
			if ev.err != nil {
				return &HostError{Host: name, Err: fmt.Errorf("connection lost before start: %w", ev.err)}
			}
			switch ev.msg.Kind {
			case wire.KindReady:
				var r wire.Ready
				if err := ev.msg.Decode(&r); err != nil {
					return &HostError{Host: name, Err: err}
				}
				if r.Err != "" {
					return &HostError{Host: name, Err: errors.New(r.Err)}
				}
				ready[ev.host] = true
			case wire.KindError:
				var e wire.Error
				_ = ev.msg.Decode(&e)
				return &HostError{Host: name, Err: errors.New(e.Msg)}
			}
		case <-deadline.C:
			var missing []string
			for i, s := range j.sessions {
				if !ready[i] {
					missing = append(missing, s.host.Name)
				}
			}
			return fmt.Errorf("hosts not ready within %v: %v", cfg.StartTimeout, missing)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (c Config) planOptions() PlanOptions {
	// The implicit local host takes any -np (as torchrun's
	// --nproc_per_node); its slots only set the default.
	return PlanOptions{MapBy: c.MapBy, NPerNode: c.NPerNode, Oversubscribe: c.Oversubscribe || c.HostSource == "local"}
}

// usedHosts keeps the hosts that run ranks and renumbers the plan.
func usedHosts(hosts []hostfile.Host, ranks []Rank) []hostfile.Host {
	used := make([]bool, len(hosts))
	for _, r := range ranks {
		used[r.Host] = true
	}
	idx := make([]int, len(hosts))
	var out []hostfile.Host
	for i, h := range hosts {
		if used[i] {
			idx[i] = len(out)
			out = append(out, h)
		}
	}
	for k := range ranks {
		ranks[k].Host = idx[ranks[k].Host]
	}
	return out
}

func without(s []string, i int) []string {
	out := make([]string, 0, len(s))
	out = append(out, s[:i]...)
	return append(out, s[i+1:]...)
}

// buildEnv computes every rank's environment from the sessions' facts:
// GPUs per host, the data interface per host (NCCL_SOCKET_IFNAME,
// GLOO_SOCKET_IFNAME, HOROVOD_GLOO_IFACE, NCCL_IB_HCA) and MASTER_ADDR on
// rank 0's data interface. It returns the GPUs chosen per host too.
func buildEnv(cfg Config, jobID string, ranks []Rank, sessions []*session, choices []*nccl.Choice) ([][]string, [][]int, error) {
	he := make([]HostEnv, len(sessions))
	gpus := make([][]int, len(sessions))
	local := make([]int, len(sessions))
	for _, r := range ranks {
		local[r.Host]++
	}
	user := map[string]string{}
	for _, kv := range cfg.Env {
		k, v, _ := strings.Cut(kv, "=")
		user[k] = v
	}
	for i, s := range sessions {
		he[i] = HostEnv{Name: s.host.Name}
		g, err := chooseGPUs(cfg, s, local[i])
		if err != nil {
			return nil, nil, err
		}
		he[i].GPUs, gpus[i] = g, g
		if c := choices[i]; c != nil {
			he[i].Net = nccl.Env(*c, user)
		}
	}
	r0 := sessions[ranks[0].Host]
	master := masterAddr(r0, choices[ranks[0].Host])
	if len(sessions) == 1 && isLocal(r0.host) {
		master = "127.0.0.1"
	}
	port := r0.facts.FreePort
	if port == 0 {
		port = 29500
	}
	envs, err := Environ(ranks, he, JobEnv{JobID: jobID, MasterAddr: master, MasterPort: port, GPUsPer: cfg.GPUsPer, User: cfg.Env, MCA: cfg.MCA})
	return envs, gpus, err
}
