// Package relay is an agent's side of the agent tree: a relay agent holds
// SSH sessions to its children (other agents, logged in to with the job
// certificate the launcher gave it) and forwards frames between them and
// its own launcher session in envelopes (agent/wire's relay.go). It never
// reads what it forwards beyond the envelope's first level.
package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/jobcert"
)

// Up is the relay's own session, toward the launcher.
type Up interface {
	Send(k wire.Kind, v any) error
	SendEnvelope(k wire.Kind, host int, inner wire.Kind, payload []byte) error
}

// Timing of a child's liveness (unless the launcher's Link gives its
// own) and of a child that stops reading.
var (
	KeepaliveInterval = 5 * time.Second
	KeepaliveTimeout  = 15 * time.Second
	StallTimeout      = 10 * time.Second
	HeartbeatInterval = 5 * time.Second
)

// silentError is why a child that answered no keepalive was cut off.
type silentError struct{ after time.Duration }

func (e silentError) Error() string {
	return fmt.Sprintf("answered no keepalive for %v", e.after)
}

// maxQueued bounds the bytes waiting for one child: past it the child
// is cut off (it takes far less than its relay is given). The relay's
// session never waits for a child, so one slow child holds up neither
// its siblings nor the relay's own ranks.
const maxQueued = 64 << 20

// Relay holds a session's children.
type Relay struct {
	up  Up
	log *zap.Logger
	ctx context.Context
	end context.CancelFunc

	mu      sync.Mutex
	signers []ssh.Signer
	self    int // this relay's index in the launch
	kids    map[int]*child
	dialing map[int]context.CancelFunc
	closed  bool
	wg      sync.WaitGroup

	// Fences combined per subtree: the children given a job (their
	// start went through this relay), whether this host's own session
	// runs ranks, and the barrier being gathered.
	started  map[int]bool
	ownRanks bool
	ownJob   bool // this host's own session was given the job (with ranks or none)
	barrier  gather
	spans    bool // send Fences as spans (Hello.FenceSpans)

	// Ends held per subtree (ends.go); endsMu is held from an Ends'
	// making to its send, before mu.
	endsOn bool
	ends   ends
	endsMu sync.Mutex

	// Answers gathered per subtree (answers.go).
	gatherOn bool
	rounds   map[wire.Kind]*round
}

// gather is one barrier of the subtree: who has entered it, with their
// puts.
type gather struct {
	seq  int // counts from 1, as the PMI servers do
	own  bool
	kids map[int][]int // child -> the hosts its fence names
	puts map[string]string
}

// New is a relay for the session up; Close ends it.
func New(ctx context.Context, up Up, log *zap.Logger) *Relay {
	ctx, end := context.WithCancel(ctx)
	return &Relay{up: up, log: log, ctx: ctx, end: end, kids: map[int]*child{}, dialing: map[int]context.CancelFunc{},
		started: map[int]bool{}, barrier: gather{seq: 1}}
}

// SetKey takes the job certificate: the key made for this relay and the
// certificates of it, each a signer the children may accept.
func (r *Relay) SetKey(k wire.RelayKey) error {
	ss, err := Signers(k)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.signers = ss
	r.self = k.Host
	r.mu.Unlock()
	return nil
}

// Signers parses a RelayKey: a certificate signer of its key for each
// of its certificates.
func Signers(k wire.RelayKey) ([]ssh.Signer, error) {
	if len(k.Certs) == 0 || len(k.Certs) > maxCerts {
		return nil, fmt.Errorf("relay key: %d certificates (1 to %d)", len(k.Certs), maxCerts)
	}
	ss, err := jobcert.Bundle{Key: k.Key, Certs: k.Certs}.Signers()
	if err != nil {
		return nil, fmt.Errorf("relay key: %w", err)
	}
	return ss, nil
}

// maxCerts bounds the certificates of one relay key (one per key of the
// user's that signed it).
const maxCerts = 16

// child is one open child session.
type child struct {
	host   int
	name   string
	client *ssh.Client
	conn   *wire.Conn
	qmu    sync.Mutex
	queued []wire.Msg // what waits for the writer, in order
	qbytes int
	more   chan struct{} // a frame was queued (capacity 1)
	quit   chan struct{}
	once   sync.Once
	why    error // why the relay closed it (nil: the child or the launcher did)

	interval, silence time.Duration // keepalive timing
	beat              time.Duration // how often the relay pings it for the launcher

	// greeted: the launcher's first frame for it (its Hello) has been
	// queued. A child's agent takes nothing before its Hello (it ends a
	// session that begins with anything else), so until then the relay
	// sends it neither pings nor spread frames: under load the launcher
	// can take longer than a heartbeat interval to check the child's
	// host key and send that Hello.
	greeted atomic.Bool
}

func (c *child) close(why error) {
	c.once.Do(func() {
		c.why = why
		close(c.quit)
		c.client.Close()
	})
}

// Link opens a session to the child l names, in the background, and
// answers with Linked; the child's frames then go up in envelopes until
// it ends (Cut) or is unlinked.
func (r *Relay) Link(l wire.Link) error {
	if err := l.Validate(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return nil
	case r.signers == nil:
		return errors.New("link before the relay's key")
	case r.kids[l.Host] != nil || r.dialing[l.Host] != nil:
		return fmt.Errorf("link: host %d is already linked", l.Host)
	case len(r.kids)+len(r.dialing) >= wire.MaxLinks:
		return fmt.Errorf("link: more than %d children", wire.MaxLinks)
	}
	ctx, cancel := context.WithTimeout(r.ctx, time.Duration(l.TimeoutMS)*time.Millisecond)
	r.dialing[l.Host] = cancel
	signers := r.signers
	r.wg.Go(func() {
		defer cancel()
		c, ans := r.dial(ctx, l, signers)
		r.mu.Lock()
		_, wanted := r.dialing[l.Host]
		delete(r.dialing, l.Host)
		if c != nil && (!wanted || r.closed) {
			c.client.Close()
			c = nil
			ans = wire.Linked{Host: l.Host, Err: "unlinked while connecting"}
		}
		if c != nil {
			r.kids[l.Host] = c
		}
		r.mu.Unlock()
		// Linked goes up before any of the child's frames.
		if err := r.up.Send(wire.KindLinked, ans); err != nil || c == nil {
			if c != nil {
				c.close(err)
				r.mu.Lock()
				delete(r.kids, l.Host)
				r.mu.Unlock()
			}
			return
		}
		r.log.Debug("linked", zap.Int("host", l.Host), zap.String("name", l.Name), zap.String("addr", ans.Addr))
		r.wg.Go(func() { r.write(c) })
		r.wg.Go(func() { r.keepalive(c) })
		r.wg.Go(func() { r.heartbeat(c) })
		r.read(c)
	})
	return nil
}

// dial logs in to l's agent with the job certificate and opens the gangway
// subsystem.
func (r *Relay) dial(ctx context.Context, l wire.Link, signers []ssh.Signer) (*child, wire.Linked) {
	ans := wire.Linked{Host: l.Host}
	fail := func(err error) (*child, wire.Linked) {
		ans.Err = fmt.Sprintf("%s: %v", l.Addr, err)
		return nil, ans
	}
	var nd net.Dialer
	nc, err := nd.DialContext(ctx, "tcp", l.Addr)
	if err != nil {
		ans.Dial, ans.DNSName = dialFailure(err)
		return fail(err)
	}
	if ta, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		ans.Addr = ta.IP.String()
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	var hostKey ssh.PublicKey
	cfg := &ssh.ClientConfig{
		User:              l.User,
		HostKeyAlgorithms: l.HostKeyAlgorithms,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(signers...)},
		// The launcher checks the key against its known hosts before it
		// sends this child anything (Linked.HostKey).
		HostKeyCallback: func(_ string, _ net.Addr, k ssh.PublicKey) error { hostKey = k; return nil },
	}
	sc, chans, reqs, err := ssh.NewClientConn(nc, l.Addr, cfg)
	if !stop() {
		if err == nil {
			sc.Close()
		}
		ans.Dial = wire.DialTimeout
		return fail(context.Cause(ctx))
	}
	if err != nil {
		nc.Close()
		ans.Refused = strings.Contains(err.Error(), "unable to authenticate")
		return fail(errors.New("ssh handshake failed: " + wire.HandshakeWhy(err)))
	}
	client := ssh.NewClient(sc, chans, reqs)
	ch, in, err := client.OpenChannel("session", nil)
	if err != nil {
		client.Close()
		return fail(fmt.Errorf("open session: %w", err))
	}
	r.wg.Go(func() { ssh.DiscardRequests(in) })
	ok, err := ch.SendRequest("subsystem", true, ssh.Marshal(struct{ Name string }{wire.Subsystem}))
	if err != nil || !ok {
		client.Close()
		ans.Refused = true
		return fail(fmt.Errorf("the agent refused the %q subsystem to the job certificate: %v", wire.Subsystem, err))
	}
	ans.HostKey = hostKey.Marshal()
	c := &child{host: l.Host, name: l.Name, client: client, conn: wire.NewConn(ch), more: make(chan struct{}, 1), quit: make(chan struct{}),
		interval: KeepaliveInterval, silence: KeepaliveTimeout}
	if l.KeepaliveMS > 0 {
		c.interval = time.Duration(l.KeepaliveMS) * time.Millisecond
	}
	if l.KeepaliveTimeoutMS > 0 {
		c.silence = time.Duration(l.KeepaliveTimeoutMS) * time.Millisecond
	}
	c.beat = HeartbeatInterval
	if l.HeartbeatMS > 0 {
		c.beat = time.Duration(l.HeartbeatMS) * time.Millisecond
	}
	return c, ans
}

// dialFailure is why a TCP dial failed, as Linked.Dial says it.
func dialFailure(err error) (why, name string) {
	var dns *net.DNSError
	switch {
	case errors.As(err, &dns) && dns.IsNotFound:
		return wire.DialNoSuchHost, dns.Name
	case errors.As(err, &dns):
		return wire.DialDNS, dns.Name
	case errors.Is(err, syscall.ECONNREFUSED):
		return wire.DialRefused, ""
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return wire.DialNoRoute, ""
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return wire.DialTimeout, ""
	}
	return "", ""
}

// read forwards the child's frames up until its session ends, then says
// so (Cut).
func (r *Relay) read(c *child) {
	var err error
	for {
		var m wire.Msg
		m, err = c.conn.Recv()
		if err != nil {
			break
		}
		if m.Kind == wire.KindFence || m.Kind == wire.KindFences {
			combined, ferr := r.childFence(c, m)
			if ferr != nil {
				c.close(ferr)
				continue // read ends with the child's connection
			}
			if combined {
				continue // into this relay's Fences
			}
		}
		if m.Kind == wire.KindEnds {
			taken, eerr := r.childEnds(c, m)
			if eerr != nil {
				c.close(eerr)
				continue
			}
			if taken {
				m.Release()
				continue // into this relay's Ends
			}
		}
		if m.Kind == wire.KindCut {
			// A grandchild lost: a host held as ended goes up first, so
			// that the launcher does not count it lost.
			r.flushEnds()
		}
		if taken, aerr := r.childAnswer(c, m); aerr != nil || taken {
			m.Release()
			if aerr != nil {
				c.close(aerr)
			}
			continue // into this relay's Gathered
		}
		err = r.up.SendEnvelope(wire.KindRelayed, c.host, m.Kind, m.Payload)
		m.Release()
		if err != nil {
			break // the relay's own session is gone; Close ends the rest
		}
	}
	c.close(nil)
	r.endsMu.Lock()
	defer r.endsMu.Unlock()
	r.mu.Lock()
	if r.kids[c.host] == c {
		delete(r.kids, c.host)
	}
	closed := r.closed
	var flush *wire.Fences
	if r.started[c.host] {
		// The barrier no longer waits for it (the launcher fails the
		// job for a lost host anyway).
		delete(r.started, c.host)
		delete(r.barrier.kids, c.host)
		flush = r.ready()
	}
	answers := r.childLost(c.host)
	endsHeld, endsDue := r.childGone(c.host)
	r.mu.Unlock()
	r.send(flush)
	for _, g := range answers {
		_ = r.sendGathered(g)
	}
	if closed {
		return
	}
	r.sendEnds(endsHeld)      // before its Cut: a host held as ended is not counted lost
	defer r.sendEnds(endsDue) // before endsMu's unlock (deferred first)
	cut := wire.Cut{Host: c.host}
	var silent silentError
	switch {
	case errors.As(c.why, &silent):
		cut.Err, cut.SilentMS = c.why.Error(), silent.after.Milliseconds()
	case c.why != nil:
		cut.Err = c.why.Error()
	case err != nil && !errors.Is(err, io.EOF):
		cut.Err = err.Error()
	}
	_ = r.up.Send(wire.KindCut, cut)
}

// write sends the child what the launcher sent it, in order; a write
// that makes no progress for StallTimeout, or for longer than the
// keepalives take to find the child silent when that is longer, cuts the
// child off (wire.StallBound).
func (r *Relay) write(c *child) {
	bound := wire.StallBound(StallTimeout, c.interval, c.silence)
	for {
		c.qmu.Lock()
		batch := c.queued
		c.queued, c.qbytes = nil, 0
		c.qmu.Unlock()
		for _, m := range batch {
			t := time.AfterFunc(bound, func() {
				c.close(fmt.Errorf("%s stopped reading what its relay sends (a write made no progress for %v)", c.name, bound))
			})
			err := c.conn.SendMsg(m)
			t.Stop()
			if err != nil {
				c.close(fmt.Errorf("write to %s: %w", c.name, err))
				return
			}
		}
		select {
		case <-c.more:
		case <-c.quit:
			return
		}
	}
}

// heartbeat pings the child for the launcher, which pings only the hosts
// it holds itself: the child's watchdog (--launcher-timeout) hears from
// its relay, whose own watchdog hears from the launcher (or from its
// relay), so a silent launcher still stops every host's ranks.
func (r *Relay) heartbeat(c *child) {
	c.every(c.beat, func() bool {
		if c.greeted.Load() {
			r.queue(c, wire.Msg{Kind: wire.KindPing})
		}
		return true
	})
}

// every calls tick every d until the child is closed or tick returns
// false.
func (c *child) every(d time.Duration, tick func() bool) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-c.quit:
			return
		case <-t.C:
			if !tick() {
				return
			}
		}
	}
}

// keepalive closes a child that stops answering SSH keepalives, as the
// launcher does with the agents it holds.
func (r *Relay) keepalive(c *child) {
	c.every(c.interval, func() bool {
		reply := make(chan error, 1)
		go func() {
			_, _, err := c.client.SendRequest("keepalive@openssh.com", true, nil)
			reply <- err
		}()
		select {
		case err := <-reply:
			return err == nil // else the connection is gone; read says so
		case <-time.After(c.silence):
			c.close(silentError{c.silence})
		case <-c.quit:
		}
		<-reply
		return false
	})
}

// Forward passes an envelope from the launcher on to its child. A frame
// for a child that is gone is dropped (its Cut is on the way up).
func (r *Relay) Forward(m wire.Msg) error {
	host, inner, err := m.Envelope()
	if err != nil {
		return err
	}
	r.mu.Lock()
	c := r.kids[host]
	if c != nil && inner.Kind == wire.KindStart {
		r.started[host] = true
	}
	r.mu.Unlock()
	if c == nil {
		return nil
	}
	r.queue(c, inner)
	c.greeted.Store(true) // after the queue: a spread cannot pass it
	return nil
}

// queue hands m to c's writer without waiting; a child with more than
// maxQueued bytes waiting is cut off.
func (r *Relay) queue(c *child, m wire.Msg) {
	c.qmu.Lock()
	c.queued = append(c.queued, m)
	c.qbytes += len(m.Payload)
	over := c.qbytes > maxQueued
	c.qmu.Unlock()
	if over {
		c.close(fmt.Errorf("%s stopped reading what its relay sends (%d MiB waiting)", c.name, maxQueued>>20))
		return
	}
	select {
	case c.more <- struct{}{}:
	default:
	}
}

// Spread passes a spread frame on to every child (each passes it on to
// its own), for the session to act on itself too.
func (r *Relay) Spread(m wire.Msg) {
	r.mu.Lock()
	kids := make([]*child, 0, len(r.kids))
	for _, c := range r.kids {
		kids = append(kids, c)
	}
	r.mu.Unlock()
	for _, c := range kids {
		if c.greeted.Load() {
			r.queue(c, m)
		}
	}
}

// OwnJob says whether this host's own session runs ranks, whose fences
// the subtree's then waits for.
func (r *Relay) OwnJob(ranks bool) {
	r.mu.Lock()
	r.ownRanks = ranks
	r.ownJob = true
	r.mu.Unlock()
}

// OwnGo says this host's own session started its job's ranks (Go):
// the subtree's ends wait for its own end too.
func (r *Relay) OwnGo() {
	r.mu.Lock()
	r.ownJob = true
	r.mu.Unlock()
}

// OwnFence takes this host's own fence into the subtree's when children
// were given the job; false: there is nothing to combine, and the session
// sends its fence itself.
func (r *Relay) OwnFence(seq int, puts map[string]string) (bool, error) {
	r.mu.Lock()
	if len(r.started) == 0 {
		r.mu.Unlock()
		return false, nil
	}
	b := &r.barrier
	if b.own || seq != b.seq {
		r.mu.Unlock()
		return true, fmt.Errorf("its own fence %d while barrier %d gathers", seq, b.seq)
	}
	b.own = true
	b.merge(puts)
	flush := r.ready()
	r.mu.Unlock()
	return true, r.send(flush)
}

// SetFenceSpans says whether the launcher takes this relay's Fences with
// their hosts as spans (Hello.FenceSpans: it does for the relays it
// reaches itself, whose Fences go to it).
func (r *Relay) SetFenceSpans(on bool) {
	r.mu.Lock()
	r.spans = on
	r.mu.Unlock()
}

// childFence takes a started child's Fence (or its own subtree's
// Fences) into the barrier being gathered (combined); an error is the
// child's protocol violation. A child that was given no job passes its
// fence on unchanged (not combined: the launcher judges it).
func (r *Relay) childFence(c *child, m wire.Msg) (combined bool, err error) {
	var f wire.Fences
	if m.Kind == wire.KindFence {
		var one wire.Fence
		if err := m.Decode(&one); err != nil {
			return false, err
		}
		f = wire.Fences{Seq: one.Seq, Hosts: []int{c.host}, Puts: one.Puts}
	} else if err := m.Decode(&f); err != nil {
		return false, err
	} else if len(f.Spans) > 0 {
		// Only the launcher's own sessions are told Hello.FenceSpans,
		// and a child of a relay is not one of them.
		return false, fmt.Errorf("protocol violation of %s: its fences name spans, which it was not told to send", c.name)
	}
	r.mu.Lock()
	if !r.started[c.host] {
		r.mu.Unlock()
		return false, nil
	}
	b := &r.barrier
	if _, dup := b.kids[c.host]; dup || f.Seq != b.seq {
		r.mu.Unlock()
		return false, fmt.Errorf("protocol violation of %s: fence %d while barrier %d gathers", c.name, f.Seq, b.seq)
	}
	if b.kids == nil {
		b.kids = map[int][]int{}
	}
	b.kids[c.host] = f.Hosts
	b.merge(f.Puts)
	flush := r.ready()
	r.mu.Unlock()
	return true, r.send(flush)
}

func (b *gather) merge(puts map[string]string) {
	if len(puts) == 0 {
		return
	}
	if b.puts == nil {
		b.puts = map[string]string{}
	}
	for k, v := range puts {
		b.puts[k] = v
	}
}

// ready is the subtree's Fences once everyone it waits for has entered
// the barrier (the next barrier then gathers), else nil. r.mu is held.
func (r *Relay) ready() *wire.Fences {
	b := &r.barrier
	if (r.ownRanks && !b.own) || (!b.own && len(b.kids) == 0) {
		return nil
	}
	for h := range r.started {
		if _, in := b.kids[h]; !in {
			return nil
		}
	}
	f := &wire.Fences{Seq: b.seq, Puts: b.puts}
	if b.own {
		f.Hosts = append(f.Hosts, r.self)
	}
	for _, hs := range b.kids {
		f.Hosts = append(f.Hosts, hs...)
	}
	if r.spans {
		f.Compact()
	} else {
		sort.Ints(f.Hosts)
	}
	r.barrier = gather{seq: b.seq + 1}
	return f
}

func (r *Relay) send(f *wire.Fences) error {
	if f == nil {
		return nil
	}
	return r.up.Send(wire.KindFences, f)
}

// Unlink closes a child's session, or stops its dial.
func (r *Relay) Unlink(host int) {
	r.mu.Lock()
	c := r.kids[host]
	if cancel := r.dialing[host]; cancel != nil {
		delete(r.dialing, host)
		cancel()
	}
	r.mu.Unlock()
	if c != nil {
		c.close(nil)
	}
}

// Close ends every child's session (each child's agent then stops its
// ranks, as when its launcher goes) and waits for the relay's goroutines.
func (r *Relay) Close() {
	r.mu.Lock()
	r.closed = true
	for k := range r.rounds {
		r.endRound(k) // what they hold goes nowhere: the session is ending
	}
	if t := r.ends.timer; t != nil && t.Stop() {
		r.ends.timer = nil
		r.wg.Done()
	}
	kids := make([]*child, 0, len(r.kids))
	for _, c := range r.kids {
		kids = append(kids, c)
	}
	r.mu.Unlock()
	r.end()
	for _, c := range kids {
		c.close(errors.New("relay closing"))
	}
	r.wg.Wait()
}
