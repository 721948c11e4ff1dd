package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"gangway/agent/wire"
	"gangway/hostfile"
	"gangway/internal/syncx"
)

// Dialer opens a protocol stream to the agent on one host. addr is the
// address the launcher reached the host on ("" when not a network address).
type Dialer interface {
	Dial(ctx context.Context, h hostfile.Host) (rwc io.ReadWriteCloser, addr string, err error)
}

// DialerFunc adapts a function to Dialer.
type DialerFunc func(ctx context.Context, h hostfile.Host) (io.ReadWriteCloser, string, error)

// Dial calls f.
func (f DialerFunc) Dial(ctx context.Context, h hostfile.Host) (io.ReadWriteCloser, string, error) {
	return f(ctx, h)
}

// agentPorter is a connection that knows the port its agent listens on
// (an agent started by srun listens on an ephemeral one): the preflight
// probes that port.
type agentPorter interface{ AgentPort() int }

// ErrPermanent marks dial errors that retrying cannot fix (authentication,
// host key, protocol version); errors.Is(err, ErrPermanent) tells them.
var ErrPermanent = errors.New("permanent")

// permanentError marks err permanent without changing its message.
type permanentError struct{ error }

func (p permanentError) Unwrap() error        { return p.error }
func (p permanentError) Is(target error) bool { return target == ErrPermanent }

func permanent(err error) error { return permanentError{err} }

// session is one host's open protocol stream.
type session struct {
	idx      int
	host     hostfile.Host
	conn     *wire.Conn
	addr     string
	port     int // the agent's port when its connection says (agentPorter), else 0
	facts    wire.Facts
	stopBeat func()
}

// HeartbeatInterval is how often the launcher tells each agent it is
// alive; an agent that hears nothing for its --launcher-timeout (30 s by
// default) stops the job's ranks, which covers a stopped launcher and a
// silent network partition.
var HeartbeatInterval = 5 * time.Second

// close ends the session: the heartbeat, then the connection.
func (s *session) close() {
	s.stopBeat()
	s.conn.Close()
}

// heartbeat sends a Ping every interval until stopped or the connection
// fails.
func heartbeat(c *wire.Conn, interval time.Duration) (stop func()) {
	return every(interval, func(<-chan struct{}) bool { return c.Send(wire.KindPing, nil) == nil })
}

// HostError says which host failed and how.
type HostError struct {
	Host string
	Err  error
}

func (e *HostError) Error() string { return fmt.Sprintf("host %s: %v", e.Host, e.Err) }
func (e *HostError) Unwrap() error { return e.Err }

// isLocal reports whether h is served by the in-process agent.
func isLocal(h hostfile.Host) bool {
	return h.Port == 0 && h.User == "" && (h.Name == "localhost" || h.Name == "127.0.0.1")
}

// localHost is the implicit host of a job given no hosts: this machine,
// through the in-process agent.
func localHost(slots int) hostfile.Host { return hostfile.Host{Name: "localhost", Slots: slots} }

// localSlots is the local host's default rank count: one per GPU, else one
// per CPU.
func localSlots(f wire.Facts) int {
	if len(f.GPUs) > 0 {
		return len(f.GPUs)
	}
	return max(f.CPUs, 1)
}

// cluster is the outcome of the dial phase: one open session per host
// that runs ranks and, for a job, the plan over them.
type cluster struct {
	sessions []*session
	ranks    []Rank
}

func (c *cluster) close() {
	for _, s := range c.sessions {
		s.close()
	}
}

// dial is the first phase of a job and of --inspect: it plans the job
// (plan=true; a bad -np fails before any network traffic), reaches every
// host that runs ranks, and gives the implicit local host its slots from
// its facts. Plan errors are usage errors.
func dial(ctx context.Context, cfg Config, d Deps, jobID string, plan bool) (*cluster, error) {
	hosts := cfg.Place.Hosts
	local := cfg.Place.Source == HostsLocal
	if local {
		hosts = []hostfile.Host{localHost(1)}
	}
	var ranks []Rank
	perSocket := cfg.Place.PerSocket > 0
	if plan && !local && !perSocket {
		var err error
		if ranks, err = Plan(hosts, cfg.Place.NP, cfg.Place.planOptions()); err != nil {
			return nil, usageError{err}
		}
		hosts = usedHosts(hosts, ranks)
	}
	names := make([]string, len(hosts))
	for i, h := range hosts {
		names[i] = h.Name
	}
	hello := func(i int) wire.Hello {
		return wire.Hello{Version: wire.Version, Launcher: d.Version, JobID: jobID, Host: hosts[i].Name, Peers: routePeers(names, i)}
	}
	sessions, err := dialAll(ctx, d.Log, hosts, d.Local, d.Remote, hello, cfg.Transport.StartTimeout)
	if err != nil {
		return nil, err
	}
	c := &cluster{sessions: sessions, ranks: ranks}
	if plan && perSocket {
		if c.ranks, err = planPerSocket(cfg, sessions); err != nil {
			c.close()
			return nil, usageError{err}
		}
	} else if local {
		sessions[0].host.Slots = localSlots(sessions[0].facts)
		if plan {
			if c.ranks, err = Plan([]hostfile.Host{sessions[0].host}, cfg.Place.NP, cfg.Place.planOptions()); err != nil {
				c.close()
				return nil, usageError{err}
			}
		}
	}
	return c, nil
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

// dialAll connects to every host concurrently, retrying with backoff until
// timeout, and says while waiting which hosts are still missing. It
// returns every session or, at the deadline, an error naming each missing
// host and why.
func dialAll(ctx context.Context, log *zap.Logger, hosts []hostfile.Host, local, remote Dialer, hello func(i int) wire.Hello, timeout time.Duration) ([]*session, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sessions := make([]*session, len(hosts))
	w := &waiting{hosts: hosts, lastErr: map[int]error{}}
	var wg sync.WaitGroup
	for i, h := range hosts {
		d := remote
		if isLocal(h) {
			d = local
		}
		wg.Go(func() { sessions[i] = dialRetry(ctx, d, i, h, hello(i), w.note) })
	}
	w.report(log, syncx.Done(wg.Wait)) // returns when every dial has ended
	var errs []error
	for i := range hosts {
		if sessions[i] == nil {
			err := w.lastErr[i]
			if err == nil {
				err = ctx.Err()
			}
			errs = append(errs, &HostError{Host: hosts[i].Name, Err: err})
		}
	}
	if len(errs) == 0 {
		return sessions, nil
	}
	for _, s := range sessions {
		if s != nil {
			s.close()
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, fmt.Errorf("hosts not reachable within --start-timeout %v: %w", timeout, errors.Join(errs...))
	}
	return nil, fmt.Errorf("cannot reach every host: %w", errors.Join(errs...))
}

// dialRetry dials one host until it answers, a permanent error, or ctx
// ends; note hears every failed attempt (nil once connected).
func dialRetry(ctx context.Context, d Dialer, i int, h hostfile.Host, hello wire.Hello, note func(i int, err error)) *session {
	backoff := 50 * time.Millisecond
	for {
		s, err := dialOne(ctx, d, i, h, hello)
		note(i, err)
		if err == nil {
			return s
		}
		if errors.Is(err, ErrPermanent) || d == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// waiting tracks the hosts not reached yet and why.
type waiting struct {
	hosts   []hostfile.Host
	mu      sync.Mutex
	lastErr map[int]error
}

func (w *waiting) note(i int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		delete(w.lastErr, i)
	} else {
		w.lastErr[i] = err
	}
}

// report says every 3 s which hosts are still missing, until done.
func (w *waiting) report(log *zap.Logger, done <-chan struct{}) {
	tick := time.NewTicker(3 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		w.mu.Lock()
		var missing []string
		for i, err := range w.lastErr {
			missing = append(missing, fmt.Sprintf("%s (%v)", w.hosts[i].Name, err))
		}
		w.mu.Unlock()
		sort.Strings(missing)
		if len(missing) > 0 {
			// Warn, not Info: the launcher logs warnings by default, and
			// users must see which hosts they are waiting for.
			log.Warn("waiting for hosts", zap.Int("missing", len(missing)), zap.String("hosts", strings.Join(missing, ", ")))
		}
	}
}

// dialOne opens one session: transport, Hello, Facts.
func dialOne(ctx context.Context, d Dialer, i int, h hostfile.Host, hello wire.Hello) (*session, error) {
	if d == nil {
		return nil, permanent(errors.New("no transport for this host"))
	}
	rwc, addr, err := d.Dial(ctx, h)
	if err != nil {
		return nil, err
	}
	conn := wire.NewConn(rwc)
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if err := conn.Send(wire.KindHello, hello); err != nil {
		conn.Close()
		return nil, fmt.Errorf("send hello: %w", err)
	}
	m, err := conn.Recv()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("agent closed the session: %w", err)
	}
	switch m.Kind {
	case wire.KindFacts:
	case wire.KindError:
		var e wire.Error
		_ = m.Decode(&e)
		conn.Close()
		return nil, permanent(fmt.Errorf("agent refused: %s", e.Msg))
	default:
		conn.Close()
		return nil, permanent(fmt.Errorf("agent sent %s instead of facts", m.Kind))
	}
	var f wire.Facts
	if err := m.Decode(&f); err != nil {
		conn.Close()
		return nil, err
	}
	if f.Version != wire.Version {
		conn.Close()
		return nil, permanent(&wire.VersionError{Ours: wire.Version, Theirs: f.Version})
	}
	port := 0
	if p, ok := rwc.(agentPorter); ok {
		port = p.AgentPort()
	}
	return &session{idx: i, host: h, conn: conn, addr: addr, port: port, facts: f, stopBeat: heartbeat(conn, HeartbeatInterval)}, nil
}

// planPerSocket plans -map-by ppr:N:socket once the hosts' facts tell
// their sockets: every host gets N slots per socket. Every dialled host
// must run ranks.
func planPerSocket(cfg Config, sessions []*session) ([]Rank, error) {
	hosts := make([]hostfile.Host, len(sessions))
	for i, s := range sessions {
		if s.facts.Sockets < 1 {
			return nil, fmt.Errorf("-map-by ppr:%d:socket: host %s does not report its sockets (an older agent, or no CPU topology in sysfs)", cfg.Place.PerSocket, s.host.Name)
		}
		s.host.Slots = cfg.Place.PerSocket * s.facts.Sockets
		hosts[i] = s.host
	}
	o := cfg.Place.planOptions()
	o.Oversubscribe = false
	ranks, err := Plan(hosts, cfg.Place.NP, o)
	if err != nil {
		return nil, err
	}
	if used := usedHosts(hosts, ranks); len(used) != len(hosts) {
		return nil, fmt.Errorf("-map-by ppr:%d:socket: -np %d leaves hosts without ranks; give fewer hosts", cfg.Place.PerSocket, len(ranks))
	}
	return ranks, nil
}
