package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/internal/syncx"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/diagnose"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/launcher/rankenv"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// Cluster is the outcome of the dial phase: one open session per host
// of the layout and, for a job, the plan over them.
type Cluster struct {
	sessions []*session
	ranks    []plan.Rank
	tree     *transport.Tree // the agent tree the hosts were reached through; nil: flat
}

// Hosts are the sessions' hosts as the rank-environment pipeline sees
// them, in the layout's order.
func (c *Cluster) Hosts() []rankenv.Host { return views(c.sessions) }

// Close ends every session.
func (c *Cluster) Close() {
	for _, s := range c.sessions {
		s.close()
	}
}

// Dial is the first phase of a job and of --inspect: it reaches every
// host of the layout (for a job, those that run ranks), and completes the
// layout from their facts (the local host's slots; for a job whose slots
// come from the facts, the plan). Plan errors are usage errors.
func Dial(ctx context.Context, cfg cli.Config, d Deps, jobID string, l rankenv.Layout) (*Cluster, error) {
	return dial(ctx, cfg, d, jobID, l, false)
}

// dial is Dial; with chooseAtHosts (a launch's attempt, not --inspect,
// which shows the routes) every host of a multi-host job, or of one
// with --network-interface, is asked to choose its own data interface
// (wire.Hello.Net) and answers with the choice instead of its routes.
func dial(ctx context.Context, cfg cli.Config, d Deps, jobID string, l rankenv.Layout, chooseAtHosts bool) (*Cluster, error) {
	hosts := l.Hosts
	var net *wire.NetRequest
	if chooseAtHosts && rankenv.ChoosesNetwork(cfg.Network, len(hosts)) {
		net = &wire.NetRequest{Force: cfg.Network.Forced()}
	}
	names := make([]string, len(hosts))
	peers := make([]string, len(hosts)) // as the hosts know each other
	for i, h := range hosts {
		names[i], peers[i] = h.Name, d.Dialers.PeerName(h)
	}
	req := healthRequest(cfg.Health, cfg.Env.Vars)
	// addrs: the hosts' addresses, where the transport knew them before
	// the sessions (transport.PeerAddresser); the agents look their peers
	// up by those, else by the name the hosts know each other by (the
	// HostName behind an ssh config alias, Dialers.PeerName).
	var tree *transport.Tree
	// What a relay's Hello and every other host's ask of their network,
	// made once for the hosts to share (each Hello is only encoded).
	relayNet, leafNet := netRequest(net, cfg.Env.Vars, true), netRequest(net, cfg.Env.Vars, false)
	// In an mpi-operator launcher pod the workers' names appear in the
	// cluster DNS as their pods come up, and a host takes its routes to
	// its peers at the Hello: each host looks a peer's missing name up
	// again until shortly before the launch stops waiting, so that a
	// worker whose pod comes up late is among its peers' routes.
	var resolveBy time.Time
	if cfg.Transport.MPIOperator {
		resolveBy = time.Now().Add(cfg.Transport.StartTimeout - resolveMargin)
	}
	hello := func(i int, addrs map[string]string) wire.Hello {
		// Chosen by index, then named: PeerNames of the whole list per
		// host was O(hosts^2) at ten thousand hosts.
		p := rankenv.RoutePeers(peers, i)
		for k := range p {
			p[k] = rankenv.PeerName(p[k], addrs)
		}
		n := leafNet
		if tree != nil && tree.Relays(hosts[i]) {
			n = relayNet
		}
		hi := wire.Hello{Version: wire.Version, Launcher: d.Version, JobID: jobID, Host: hosts[i].Name, Peers: p, Health: req, Net: n, BatchExits: true, Gather: true, Ends: true, Brief: chooseAtHosts}
		if !resolveBy.IsZero() {
			hi.ResolveWaitMS = max(time.Until(resolveBy), 0).Milliseconds()
		}
		return hi
	}
	logHosts(d.Log, cfg.Place, hosts)
	wait := dialWait{timeout: cfg.Transport.StartTimeout, grace: cfg.Transport.UnreachableGrace}
	ds, tree, err := treeDialers(cfg, d, jobID, hosts)
	if err != nil {
		return nil, err
	}
	sessions, err := dialAll(ctx, d.Log, d.Stderr, hosts, ds, hello, wait)
	if err != nil {
		return nil, err
	}
	c := &Cluster{sessions: sessions, tree: tree}
	facts := make([]wire.Facts, len(sessions))
	for i, s := range sessions {
		facts[i] = s.facts
	}
	if l, err = l.Complete(facts); err != nil {
		c.Close()
		return nil, err
	}
	for i, s := range sessions {
		s.host = l.Hosts[i]
		if s.peer == "" { // no address from the transport: as the hosts know each other
			s.peer = peers[i]
		}
	}
	c.ranks = l.Ranks
	if c.ranks != nil {
		d.Log.Info("placement", zap.Int("ranks", len(c.ranks)), zap.String("map-by", cfg.Place.MapBy), zap.String("ranks on hosts", rankenv.PlacementSummary(names, c.ranks)))
	}
	return c, nil
}

// netRequest is what a host's Hello asks of its network: net (nil:
// nothing, --inspect or a single host), brief (facts without the host's
// interfaces, wire.NetRequest.Brief) unless the launcher still reads
// them: to judge the user's NCCL_SOCKET_IFNAME (vars) on every host, or
// for a relay, whose addresses its job certificate names.
func netRequest(net *wire.NetRequest, vars map[string]string, relay bool) *wire.NetRequest {
	if _, judged := vars["NCCL_SOCKET_IFNAME"]; net == nil || judged || relay {
		return net
	}
	return &wire.NetRequest{Force: net.Force, Brief: true}
}

// resolveMargin is how long before the end of --start-timeout a host
// stops waiting for its peers' names (wire.Hello.ResolveWaitMS): its
// facts arrive while the launch still waits, and the host whose name
// never appeared is the one named.
const resolveMargin = 5 * time.Second

// treeDialers are the Dialers of one attempt: with --tree-width (or auto
// at its size) the remote hosts are reached through a tree of relays
// planned over this attempt's hosts, in their order.
func treeDialers(cfg cli.Config, d Deps, jobID string, hosts []hostfile.Host) (transport.Dialers, *transport.Tree, error) {
	ds := d.Dialers
	var remote []hostfile.Host
	for _, h := range hosts {
		if ds.Remote != nil && !plan.IsLocal(h) {
			remote = append(remote, h)
		}
	}
	w := transport.TreeWidth(cfg.Transport.TreeWidth, len(remote))
	if w == 0 {
		return ds, nil, nil
	}
	if !transport.TreeBase(ds.Remote) {
		if !cfg.Transport.TreeWidthGiven {
			return ds, nil, nil // another transport starts every agent itself
		}
		return ds, nil, fmt.Errorf("%w: --tree-width %d: relays log in to their children's agents, which --transport %s starts itself; give --tree-width 0", cli.ErrUsage, cfg.Transport.TreeWidth, cfg.Transport.Kind)
	}
	lifetime := cfg.Control.Timeout
	if lifetime <= 0 {
		lifetime = treeCertLifetime
	}
	tree, err := transport.NewTree(ds.Remote, remote, w, jobID, lifetime+time.Minute, d.Log.Named("tree"))
	if err != nil {
		return ds, nil, fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	// Where the launch gives hosts that refuse connections a grace, the
	// hosts behind a relay that is down are reached around it, so that
	// the grace ends naming the dead relay alone; where it waits the
	// whole start timeout for hosts that come up late, they wait for
	// their relay instead (the launcher then holds no connections for
	// them: thousands of pods may come up late).
	tree.SetGoAround(cfg.Transport.UnreachableGrace > 0)
	d.Log.Info("agent tree", zap.Int("width", w), zap.Int("hosts", len(remote)), zap.Int("levels", transport.TreeDepth(len(remote), w)))
	ds.Remote = tree
	return ds, tree, nil
}

// treeCertLifetime is how long a relay's certificate lasts when the job
// has no --timeout.
const treeCertLifetime = 24 * time.Hour

// logHosts says at -v where the hosts came from and which are reached
// (Dial logs where the ranks go once the plan is known).
func logHosts(log *zap.Logger, p cli.Placement, hosts []hostfile.Host) {
	names := make([]string, len(hosts))
	for i, h := range hosts {
		names[i] = h.Name
		if h.Port != 0 {
			names[i] += ":" + strconv.Itoa(h.Port)
		}
	}
	fields := []zap.Field{zap.String("source", p.Source.String()), zap.Int("n", len(hosts)), zap.String("hosts", strings.Join(names, ","))}
	if p.Source == cli.HostsFile {
		fields = append(fields, zap.String("hostfile", p.Hostfile))
	}
	log.Info("hosts", fields...)
}

// dialWait is how long dialAll waits: for every host, timeout
// (--start-timeout); for hosts where nothing answers (ErrUnreachable)
// once every other host is ready, grace (--unreachable-grace; 0: the
// whole timeout).
type dialWait struct {
	timeout, grace time.Duration
}

// dialAll connects to every host concurrently, retrying with backoff
// until wait.timeout, and while waiting keeps one status line on status
// (nil: none) that changes only when something changes: how many hosts
// are ready, how long the launcher will wait, and which hosts are not
// ready and why. A permanent error (a name that does not resolve,
// authentication, the host key) ends the wait at once: no host is tried
// again, and attempts under way get permanentGrace to end (so that hosts
// failing the same way are all named). Hosts where nothing answers while
// every other host is ready are given wait.grace, then the wait ends
// (errUnreachableGrace). It returns every session or an error naming each
// missing host and why.
func dialAll(ctx context.Context, log *zap.Logger, status io.Writer, hosts []hostfile.Host, ds transport.Dialers, hello helloFunc, wait dialWait) ([]*session, error) {
	ctx, cancel := context.WithTimeout(ctx, wait.timeout)
	defer cancel()
	// A permanent failure of one host fails the job: stop waiting for
	// the others.
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	giveUp := make(chan struct{})
	var once sync.Once
	var grace *time.Timer
	defer func() {
		once.Do(func() {}) // no timer starts from here on
		if grace != nil {
			grace.Stop()
		}
	}()
	failed := func(err error) {
		once.Do(func() {
			close(giveUp)
			grace = time.AfterFunc(permanentGrace, func() { fail(err) })
		})
	}
	sessions := make([]*session, len(hosts))
	// One decoder for the attempt's facts: the parts hosts of one shape
	// share are decoded once and held once (wire.FactsDecoder).
	facts := new(wire.FactsDecoder)
	w := &waiting{hosts: hosts, lastErr: map[int]error{}, wait: wait, expire: fail}
	defer w.stop()
	var wg sync.WaitGroup
	roots, after := dialOrder(hosts, ds)
	// dial runs host i's dial in a goroutine of wg, which the caller
	// has added to.
	var dial func(i int)
	dial = func(i int) {
		h := hosts[i]
		d := ds.For(h)
		go func() {
			start := time.Now()
			// The hosts behind this one start once its first attempt has
			// ended: ready, they find it so; failed, they try its
			// replacement or wait for it as they would have. Where the
			// transport can, it starts their logins first, and their
			// dials once the relay has an answer (transport.Prelinker):
			// until then they hold nothing here.
			var once sync.Once
			first := func() {
				once.Do(func() {
					ks := after[i]
					wg.Add(len(ks))
					hs := make([]hostfile.Host, len(ks))
					for j, k := range ks {
						hs[j] = hosts[k]
					}
					ds.Prelink(ctx, hs, func(j int) { dial(ks[j]) })
				})
			}
			// The dial ends in done, in this goroutine or, where it
			// waits for the host's facts, in the one its stream starts
			// once they are in (retry.later).
			done := func(s *session) {
				defer wg.Done()
				defer first()
				sessions[i] = s
				if s != nil {
					log.Info("connected", zap.String("host", h.Name), zap.String("addr", s.addr), zap.Duration("took", time.Since(start).Round(time.Millisecond)))
				} else if err := w.err(i); errors.Is(err, transport.ErrPermanent) {
					failed(err)
				}
			}
			r := &retry{ctx: ctx, giveUp: giveUp, d: d, i: i, h: h, hello: hello, facts: facts, done: done, note: func(i int, err error) {
				w.note(i, err)
				first()
			}}
			r.run()
		}()
	}
	for _, i := range roots {
		wg.Add(1)
		dial(i)
	}
	w.report(status, syncx.Done(wg.Wait)) // returns when every dial has ended
	var errs hostErrors
	for i := range hosts {
		if sessions[i] == nil {
			err := w.err(i)
			if err == nil && errors.Is(context.Cause(ctx), transport.ErrPermanent) {
				continue // stopped because another host failed for good
			}
			if err == nil {
				err = context.Cause(ctx)
			}
			errs = append(errs, &hostError{Host: hosts[i].Name, Err: err})
		}
	}
	if len(errs) == 0 && !slices.Contains(sessions, nil) {
		return sessions, nil
	}
	for _, s := range sessions {
		if s != nil {
			s.close()
		}
	}
	if len(errs) == 0 {
		return nil, context.Cause(ctx) // the launcher's own context ended
	}
	var ge errUnreachableGrace
	switch cause := context.Cause(ctx); {
	case cause == context.DeadlineExceeded:
		return nil, fmt.Errorf("%w: %w", errStartTimeout{wait.timeout}, errs)
	case errors.As(cause, &ge):
		return nil, fmt.Errorf("%w: %w", ge, errs)
	}
	return nil, fmt.Errorf("cannot reach every host: %w", errs)
}

// dialOrder is when each host's dial starts: roots at once, after[i]
// once host i's first attempt has ended (a host whose transport dials it
// through host i, transport.DialsAfter). A host of the agent tree then
// holds no goroutine while its relay is being reached: at 10,000 hosts
// that was 10,000 goroutines and their stacks at the launch's peak.
func dialOrder(hosts []hostfile.Host, ds transport.Dialers) (roots []int, after [][]int) {
	type key struct {
		name string
		port int
	}
	index := make(map[key]int, len(hosts))
	for i, h := range hosts {
		index[key{h.Name, h.Port}] = i
	}
	after = make([][]int, len(hosts))
	for i, h := range hosts {
		if da, ok := ds.For(h).(transport.DialsAfter); ok {
			if r, ok := da.DialAfter(h); ok {
				if j, ok := index[key{r.Name, r.Port}]; ok && j != i {
					after[j] = append(after[j], i)
					continue
				}
			}
		}
		roots = append(roots, i)
	}
	return roots, after
}

// hostErrors are the hosts a launch could not reach, and why: a line a
// host, but more than diagnose.ShortList hosts that failed the same way
// share one line naming every one in Slurm's node-list form ("40 hosts
// (gpu[0101-0140]), port 22122: connection refused (...)"), at the place
// of the first: a rack down in a job of thousands reads as one line.
type hostErrors []*hostError

func (es hostErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

func (es hostErrors) Error() string {
	type reason struct{ port, why string }
	reasonOf := func(e *hostError) reason {
		why := e.Err.Error()
		if p, r, ok := cutAddr(e.Host, why); ok {
			return reason{p, r}
		}
		return reason{"", why}
	}
	names := map[reason][]string{}
	for _, e := range es {
		r := reasonOf(e)
		names[r] = append(names[r], e.Host)
	}
	var lines []string
	said := map[reason]bool{}
	for _, e := range es {
		r := reasonOf(e)
		switch {
		case len(names[r]) <= diagnose.ShortList:
			lines = append(lines, e.Error())
		case !said[r]:
			said[r] = true
			port := ""
			if r.port != "" {
				port = ", port " + r.port
			}
			lines = append(lines, fmt.Sprintf("%s%s: %s", diagnose.HostList(names[r]), port, r.why))
		}
	}
	return strings.Join(lines, "\n")
}

// cutAddr splits an error that names h's address first ("h:22122:
// connection refused") into the port and what follows; ok is false for
// any other error.
func cutAddr(name, why string) (port, rest string, ok bool) {
	after, ok := strings.CutPrefix(why, name+":")
	if !ok {
		return "", "", false
	}
	p, r, ok := strings.Cut(after, ": ")
	if !ok || p == "" || strings.ContainsAny(p, " ") {
		return "", "", false
	}
	return p, r, true
}

// errStartTimeout ends the wait when hosts were still not reached at
// --start-timeout.
type errStartTimeout struct{ timeout time.Duration }

func (e errStartTimeout) Error() string {
	return fmt.Sprintf("hosts not reachable within --start-timeout %v", e.timeout)
}

// notReached are the hosts a dial phase's error says were not reached
// when the wait for them ended (--start-timeout, --unreachable-grace),
// none of them having failed for good (a refused login or host key, a
// name that does not resolve: what a spare must not hide); nil for any
// other error.
func notReached(err error) []*hostError {
	var hes hostErrors
	var st errStartTimeout
	var ge errUnreachableGrace
	if !errors.As(err, &hes) || !errors.As(err, &st) && !errors.As(err, &ge) {
		return nil
	}
	for _, e := range hes {
		if errors.Is(e.Err, transport.ErrPermanent) {
			return nil
		}
	}
	return hes
}

// errUnreachableGrace ends the wait when hosts where nothing answers
// have had the grace since every other host was ready.
type errUnreachableGrace struct{ grace time.Duration }

func (e errUnreachableGrace) Error() string {
	return fmt.Sprintf("hosts still unreachable %v after every other host was ready (--unreachable-grace %v; give --start-timeout to wait for them longer)", e.grace, e.grace)
}

// permanentGrace is how long attempts under way may still end after
// another host failed for good.
const permanentGrace = 2 * time.Second

// retry dials one host until it answers, a permanent error, ctx ends
// or giveUp closes (after a failed attempt); note hears every failed
// attempt (nil once connected), done the end (the session, or nil).
// Where the host's stream says when messages wait (a host of the agent
// tree), an attempt holds no goroutine while the host builds its facts:
// the goroutine that sent the Hello ends, and the stream starts another
// once the facts are in (at 10,000 hosts such waits were most of the
// launch's goroutines and their stacks at its peak).
type retry struct {
	ctx     context.Context
	giveUp  <-chan struct{}
	d       transport.Dialer
	i       int
	h       hostfile.Host
	hello   helloFunc
	facts   *wire.FactsDecoder
	note    func(i int, err error)
	done    func(*session)
	backoff time.Duration
}

// run makes attempts until one waits for its facts or the dial ends.
func (r *retry) run() {
	for {
		s, err := dialOne(r.ctx, r.d, r.i, r.h, r.hello, r.facts, r.later)
		if s == nil && err == nil {
			return // waiting for the facts: later goes on
		}
		if !r.outcome(s, err) {
			return
		}
	}
}

// later is an attempt's end once its facts came (or its stream ended).
func (r *retry) later(s *session, err error) {
	if r.outcome(s, err) {
		r.run()
	}
}

// outcome takes an attempt's end and reports whether to try again
// (after the backoff, which it waits); when not, done has run.
func (r *retry) outcome(s *session, err error) bool {
	if err != nil && r.ctx.Err() != nil {
		// The attempt was cut short: by another host's permanent
		// failure (nothing to say about this one), or by the start
		// timeout (keep the last full attempt's error, if any).
		if !errors.Is(context.Cause(r.ctx), transport.ErrPermanent) {
			r.note(r.i, cutShort{err})
		}
		r.done(nil)
		return false
	}
	r.note(r.i, err)
	if err == nil {
		r.done(s)
		return false
	}
	if errors.Is(err, transport.ErrPermanent) || r.d == nil {
		r.done(nil)
		return false
	}
	if r.backoff == 0 {
		r.backoff = 50 * time.Millisecond
	}
	select {
	case <-r.ctx.Done():
		r.done(nil)
		return false
	case <-r.giveUp:
		r.done(nil)
		return false
	case <-time.After(r.backoff):
	}
	r.backoff = min(r.backoff*2, 2*time.Second)
	return true
}

// waiting tracks the hosts reached, those not reached yet, and why; it
// runs the unreachable grace (dialWait.grace): a timer that calls expire
// once every host not ready has, for the whole grace, last failed with
// ErrUnreachable while all the others were ready.
type waiting struct {
	hosts   []hostfile.Host
	wait    dialWait
	expire  func(cause error)
	mu      sync.Mutex
	lastErr map[int]error
	ready   int
	timer   *time.Timer // the grace running; nil when it is not
	stopped bool        // stop has run: no timer starts
}

func (w *waiting) note(i int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var cut cutShort
	switch {
	case err == nil:
		delete(w.lastErr, i)
		w.ready++
	case errors.As(err, &cut):
		if w.lastErr[i] == nil {
			w.lastErr[i] = cut.error
		}
	default:
		w.lastErr[i] = err
	}
	w.checkGrace()
}

// onlyUnreachable reports whether some hosts are ready and every host not
// ready has last failed with ErrUnreachable (and at least one is not
// ready). With no host ready yet, all the agents may still be starting
// (started at the same time as the launcher): that waits --start-timeout.
// w.mu is held.
func (w *waiting) onlyUnreachable() bool {
	if w.ready == 0 || w.ready == len(w.hosts) || w.ready+len(w.lastErr) < len(w.hosts) {
		return false
	}
	for _, err := range w.lastErr {
		if !errors.Is(err, transport.ErrUnreachable) {
			return false
		}
	}
	return true
}

// checkGrace starts the grace when only unreachable hosts are missing,
// and stops it when that no longer holds. w.mu is held.
func (w *waiting) checkGrace() {
	if w.wait.grace <= 0 || w.stopped {
		return
	}
	switch on := w.onlyUnreachable(); {
	case on && w.timer == nil:
		var t *time.Timer
		t = time.AfterFunc(w.wait.grace, func() {
			w.mu.Lock()
			still := w.timer == t && !w.stopped
			w.mu.Unlock()
			if still {
				w.expire(errUnreachableGrace{w.wait.grace})
			}
		})
		w.timer = t
	case !on && w.timer != nil:
		w.timer.Stop()
		w.timer = nil
	}
}

// inGrace reports whether the grace is running. w.mu is held.
func (w *waiting) inGrace() bool { return w.timer != nil }

// stop ends the grace for good: no timer runs after it.
func (w *waiting) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
}

// cutShort is the error of an attempt that the end of the wait cut
// short; it replaces no earlier attempt's error.
type cutShort struct{ error }

func (w *waiting) err(i int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr[i]
}

// statusEvery is how often the status line is checked for a change.
const statusEvery = time.Second

// report keeps the status line on out until done: checked every
// statusEvery, printed when it differs from the last one printed.
func (w *waiting) report(out io.Writer, done <-chan struct{}) {
	tick := time.NewTicker(statusEvery)
	defer tick.Stop()
	last := ""
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		w.mu.Lock()
		line := waitingLine(w.hosts, w.ready, w.lastErr, w.waitText())
		w.mu.Unlock()
		if line != "" && line != last && out != nil {
			fmt.Fprintf(out, "launcher: %s\n", line)
			last = line
		}
	}
}

// waitText says how long the launcher waits: the whole --start-timeout,
// or, while the grace runs, the grace. w.mu is held.
func (w *waiting) waitText() string {
	if w.inGrace() {
		return fmt.Sprintf("every other host is ready, waiting %v more (--unreachable-grace)", w.wait.grace)
	}
	return fmt.Sprintf("waiting up to %v (--start-timeout)", w.wait.timeout)
}

// waitingLine is the status while hosts are missing: "ready 3/4; waiting
// up to 1m0s (--start-timeout) for a:22122: connection refused (...)",
// with how as waitText says it; hosts that failed the same way share one
// reason, and past three reasons the rest are counted. "" when no host
// has failed an attempt yet.
func waitingLine(hosts []hostfile.Host, ready int, lastErr map[int]error, how string) string {
	if len(lastErr) == 0 {
		return ""
	}
	idx := make([]int, 0, len(lastErr))
	for i := range lastErr {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	type reason struct {
		names []string
		why   string
	}
	var reasons []*reason
	by := map[string]*reason{}
	for _, i := range idx {
		name, why := hosts[i].Name, lastErr[i].Error()
		if p, r, ok := cutAddr(name, why); ok {
			name, why = name+":"+p, r
		}
		r := by[why]
		if r == nil {
			r = &reason{why: why}
			by[why] = r
			reasons = append(reasons, r)
		}
		r.names = append(r.names, name)
	}
	var parts []string
	for k, r := range reasons {
		if k == 3 {
			n := 0
			for _, r := range reasons[3:] {
				n += len(r.names)
			}
			parts = append(parts, fmt.Sprintf("%d more hosts", n))
			break
		}
		names := r.names
		if len(names) > 3 {
			names = append(names[:3:3], fmt.Sprintf("%d more", len(r.names)-3))
		}
		parts = append(parts, strings.Join(names, ", ")+": "+r.why)
	}
	return fmt.Sprintf("ready %d/%d; %s for %s", ready, len(hosts), how, strings.Join(parts, "; "))
}

// helloFunc is host i's Hello, given the hosts' addresses where the
// transport knows them before the sessions (nil: none).
type helloFunc func(i int, addrs map[string]string) wire.Hello

// dialOne opens one session: transport, Hello, Facts. With a transport
// that knows every host's address first (transport.PeerAddresser), the
// Hello waits for them and names the peers by address. Where the stream
// says when messages wait (transport.Notifier) and later is not nil, it
// does not wait for the facts: it returns nil, nil, and later gets the
// session or the error, in a goroutine of its own, once they are in or
// the stream has ended. The facts are decoded by fd.
func dialOne(ctx context.Context, d transport.Dialer, i int, h hostfile.Host, hello helloFunc, fd *wire.FactsDecoder, later func(*session, error)) (*session, error) {
	if d == nil {
		return nil, transport.Permanent(errors.New("no transport for this host"))
	}
	rwc, addr, err := d.Dial(ctx, h)
	if err != nil {
		return nil, err
	}
	var addrs map[string]string
	if pa, ok := d.(transport.PeerAddresser); ok {
		if addrs, err = pa.PeerAddrs(ctx); err != nil {
			rwc.Close()
			return nil, err
		}
	}
	conn := wire.NewConn(transport.Guard(rwc))
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	hi := hello(i, addrs)
	// A host this launcher reaches itself sends its Fences here, and
	// this launcher takes them as spans; one behind a relay sends them to
	// its relay, which may be of an older build.
	hi.FenceSpans = !transport.Relayed(rwc)
	if err := conn.Send(wire.KindHello, hi); err != nil {
		stop()
		conn.Close()
		return nil, fmt.Errorf("send hello: %w", err)
	}
	facts := func() (*session, error) {
		defer stop()
		return takeFacts(conn, rwc, i, h, addr, addrs, hi, fd)
	}
	if n, ok := rwc.(transport.Notifier); ok && later != nil {
		var once sync.Once
		n.Notify(func() {
			once.Do(func() { go func() { later(facts()) }() })
		})
		return nil, nil
	}
	return facts()
}

// takeFacts reads the agent's answer to the Hello hi, decoded by fd,
// and makes the session.
func takeFacts(conn *wire.Conn, rwc io.ReadWriteCloser, i int, h hostfile.Host, addr string, addrs map[string]string, hi wire.Hello, fd *wire.FactsDecoder) (*session, error) {
	m, err := conn.Recv()
	if err != nil {
		conn.Close()
		if errors.Is(err, transport.ErrPermanent) {
			return nil, err // the transport says why (the system ssh's message)
		}
		return nil, fmt.Errorf("agent closed the session: %w", err)
	}
	switch m.Kind {
	case wire.KindFacts:
	case wire.KindError:
		var e wire.Error
		_ = m.Decode(&e)
		conn.Close()
		return nil, transport.Permanent(fmt.Errorf("agent refused: %s", e.Msg))
	default:
		conn.Close()
		return nil, transport.Permanent(fmt.Errorf("agent sent %s instead of facts", m.Kind))
	}
	var f wire.Facts
	if err := fd.Decode(m, &f); err != nil {
		conn.Close()
		return nil, err
	}
	if f.Version != wire.Version {
		conn.Close()
		return nil, transport.Permanent(&wire.VersionError{Ours: wire.Version, Theirs: f.Version})
	}
	if err := f.Health.Validate(); err != nil {
		conn.Close()
		return nil, transport.Permanent(fmt.Errorf("protocol violation: its facts' %w", err))
	}
	if hi.Health != nil && hi.Health.Command != "" && f.Health == nil {
		// Without it, the site's check would pass unrun.
		conn.Close()
		return nil, transport.Permanent(errors.New("protocol violation: it answered without its health, so --health-check did not run"))
	}
	port := 0
	if p, ok := rwc.(transport.AgentPorter); ok {
		port = p.AgentPort()
	}
	s := &session{idx: i, host: h, conn: conn, addr: addr, peer: addrs[h.Name], port: port, facts: f, stopBeat: transport.Heartbeat(conn, rwc)}
	if n, ok := rwc.(transport.Notifier); ok {
		s.notify = n
	}
	return s, nil
}
