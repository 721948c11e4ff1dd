package transport

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/internal/jobcert"
	"github.com/gangway-hpc/gangway/internal/textx"
)

// The agent tree (docs/tree.md). With a tree of width k the launcher
// dials hosts 0..k-1 of a launch itself; host i's children are hosts
// k(i+1) .. k(i+1)+k-1, which host i's agent (a relay) logs in to with a
// job certificate the launcher signs for it alone, and whose frames it
// forwards in envelopes. Every host still has a session of its own at
// the launcher (a link): the engine cannot tell a host behind a relay from
// one it dialed, and nothing above the transport changes.

// TreeAuto is --tree-width auto: flat below TreeMinHosts hosts, else a
// tree of width TreeAutoWidth.
const (
	TreeAuto      = -1
	TreeMinHosts  = 256
	TreeAutoWidth = 32
)

// TreeWidth is the width a launch of n hosts uses for --tree-width w: 0
// for flat.
func TreeWidth(w, n int) int {
	if w == TreeAuto {
		if n < TreeMinHosts {
			return 0
		}
		return TreeAutoWidth
	}
	if n <= w {
		return 0 // every host at the first level: flat
	}
	return w
}

// TreeParent is host i's parent in a tree of width k: -1 for the
// launcher.
func TreeParent(i, k int) int {
	if k <= 0 || i < k {
		return -1
	}
	return i/k - 1
}

// treeChildren are host i's children in a tree of width k over n hosts:
// hosts lo .. hi-1 (none when lo >= hi).
func treeChildren(i, k, n int) (lo, hi int) {
	if k <= 0 {
		return 0, 0
	}
	lo = k * (i + 1)
	return min(lo, n), min(lo+k, n)
}

// TreeDepth is the levels of a tree of width k over n hosts (1: flat).
func TreeDepth(n, k int) int {
	if k <= 0 {
		return 1
	}
	d, level, total := 1, k, k
	for total < n {
		level *= k
		total += level
		d++
	}
	return d
}

// Tree reaches one launch's hosts through relays. It is made for one
// attempt's hosts (a restart plans a new tree over the hosts it keeps)
// and serves Dial for them; a host outside it is dialed by the base.
type Tree struct {
	base     treeBase
	hosts    []hostfile.Host
	index    map[nodeKey]int
	width    int
	jobID    string
	lifetime time.Duration
	log      *zap.Logger
	nodes    []*node

	// What a barrier and a spread consult, kept as the links come and
	// go so that neither walks every host: at 10,000 hosts, walking
	// each named host's chain of links (holds) and every node for the
	// first-level links (Spread) took about 25 ms and 15 ms of the
	// launcher's CPU a barrier on the two-CPU bench bed.
	top   []atomic.Pointer[link] // by host: the first-level link its current link is behind (its own, at the first level); nil while it has none
	rmu   sync.Mutex             // guards roots
	roots map[int]*link          // the links the launcher holds itself (parent nil), by host

	// around: a host whose relay is down (its own last attempt found
	// nothing listening, or nothing answering) once the host has waited
	// relayWait for it is reached by the launcher itself (SetGoAround).
	around bool
	// relayWait is how long a host waits for its relay's session before
	// its dial fails (and is tried again): the launcher's status line
	// then names the host and why (defaultRelayWait; a test's own).
	relayWait time.Duration

	refusedOnce sync.Once // the warning that a host refused a job certificate
	jumpOnce    sync.Once // the warning that a relay could not reach a host behind jump hosts
	aroundOnce  sync.Once // the warning that hosts behind a dead relay are reached directly
	reachOnce   sync.Once // the warning that a relay could not reach a host the launcher reaches
}

// TreeBase reports whether d can be the base of a tree: the agent
// transport (relays log in to agents over SSH as the launcher does) and
// the srun transport (relays log in to the agents of the step with a
// certificate of the step's key).
func TreeBase(d Dialer) bool {
	_, ok := d.(treeBase)
	return ok
}

// NewTree plans a tree of width over hosts (in launch order) on base,
// which must satisfy TreeBase. The certificates the relays get are valid
// for lifetime (the job's --timeout, or a day).
func NewTree(base Dialer, hosts []hostfile.Host, width int, jobID string, lifetime time.Duration, log *zap.Logger) (*Tree, error) {
	ad, ok := base.(treeBase)
	if !ok {
		return nil, errors.New("--tree-width needs --transport agent or slurm: relays log in to their children's agents over SSH")
	}
	if TreeDepth(len(hosts), width) > wire.MaxTreeDepth {
		return nil, fmt.Errorf("--tree-width %d makes a tree of %d levels over %d hosts; at most %d", width, TreeDepth(len(hosts), width), len(hosts), wire.MaxTreeDepth)
	}
	t := &Tree{base: ad, hosts: hosts, index: map[nodeKey]int{}, width: width, jobID: jobID, lifetime: lifetime, log: log, nodes: make([]*node, len(hosts)),
		top: make([]atomic.Pointer[link], len(hosts)), roots: map[int]*link{}, relayWait: defaultRelayWait}
	for i, h := range hosts {
		t.index[treeKey(h)] = i
		t.nodes[i] = &node{t: t, i: i, h: h, up: make(chan struct{})}
	}
	return t, nil
}

// nodeKey names a host of the tree: its name and its own port. A struct,
// not the two joined into a string: the key is looked up several times
// per host in a launch, and building the string allocated each time (2%
// of the launcher's CPU at 10,000 hosts in a profile).
type nodeKey struct {
	name string
	port int
}

func treeKey(h hostfile.Host) nodeKey { return nodeKey{h.Name, h.Port} }

// SetGoAround says whether the hosts behind a relay that is down are
// reached by the launcher itself (on), or wait for their relay (off, as
// when the launch waits the whole --start-timeout for hosts that come
// up late: mpi-operator's worker pods). A relay is down when its own
// last attempt found nothing listening or nothing answering there
// (refused, no route, a lookup that failed, a TCP connect that timed
// out), not when it is only slow to log in or reached through a relay
// that is not up itself; a host goes around it once it has waited
// relayWait for it (an agent that is starting listens within that).
// With it on, a dead host among thousands is named alone, as in a flat
// launch, not with every host behind it; the launcher then holds one
// more connection per host around it (at most the tree's width per dead
// relay). Set before the first Dial.
func (t *Tree) SetGoAround(on bool) { t.around = on }

// PeerName is as the base says.
func (t *Tree) PeerName(h hostfile.Host) string { return t.base.PeerName(h) }

// DialsAfter is a Dialer whose dial of a host waits for another host's
// session (the agent tree: a host's relay): the engine starts h's dial
// once that host's first attempt has ended, so that thousands of dials
// do not each hold a goroutine waiting for their relays.
type DialsAfter interface {
	DialAfter(h hostfile.Host) (relay hostfile.Host, ok bool)
}

// DialAfter is h's relay, whose session h's dial waits for; ok false for
// a host of the first level or not of the tree.
func (t *Tree) DialAfter(h hostfile.Host) (hostfile.Host, bool) {
	i, ok := t.index[treeKey(h)]
	if !ok {
		return hostfile.Host{}, false
	}
	p := TreeParent(i, t.width)
	if p < 0 {
		return hostfile.Host{}, false
	}
	return t.hosts[p], true
}

// Dial opens h's session: the base's for a host of the first level, else
// a link through its relay once the relay's own session is open.
func (t *Tree) Dial(ctx context.Context, h hostfile.Host) (io.ReadWriteCloser, string, error) {
	i, ok := t.index[treeKey(h)]
	if !ok {
		return t.base.Dial(ctx, h)
	}
	n := t.nodes[i]
	rwc, addr, err := t.dial(ctx, n)
	n.noteErr(err)
	return rwc, addr, err
}

// dial is Dial of a host of the tree.
func (t *Tree) dial(ctx context.Context, n *node) (io.ReadWriteCloser, string, error) {
	p := TreeParent(n.i, t.width)
	if p < 0 {
		return t.dialDirect(ctx, n)
	}
	relay := t.nodes[p]
	n.mu.Lock()
	pre := n.pre
	n.pre = nil
	n.mu.Unlock()
	if pre != nil {
		return t.awaitLinked(ctx, n, pre.c, relay, pre.pl, pre.wait)
	}
	c, err := t.base.child(ctx, n.h)
	if err != nil {
		return nil, "", err
	}
	pl, err := relay.waitReady(ctx, t.relayWait)
	switch {
	case errors.Is(err, errRelayFailed):
		// A host whose relay cannot be reached is reached directly: it
		// is tried, and named if it fails, as in a flat launch.
		t.log.Debug("relay not reached; dialing directly", zap.String("host", n.h.Name), zap.String("relay", relay.h.Name))
		return t.dialDirect(ctx, n)
	case t.around && errors.Is(err, errRelayDown):
		t.aroundOnce.Do(func() {
			t.log.Warn("a relay is down; the launcher reaches the hosts behind such relays itself", zap.String("host", n.h.Name), zap.String("relay", relay.h.Name), zap.String("why", relay.lastErr()))
		})
		return t.dialDirect(ctx, n)
	case err != nil:
		return nil, "", err
	}
	return t.dialLinked(ctx, n, c, relay, pl)
}

// Prelinker is a Dialer that can start what hosts' dials will wait for
// ahead of the dials.
type Prelinker interface {
	// Prelink starts what each of hs's dials will wait for and calls
	// ready(k) once for hs[k], from any goroutine, when its dial would
	// find it: at once when there is nothing to start, else once the
	// answer is in, ctx has ended, or the answer is overdue (the dial
	// then waits as it would have). Prelink sends what it starts, all of
	// it together where it can, and waits for no answer.
	Prelink(ctx context.Context, hs []hostfile.Host, ready func(k int))
}

// prelinked is a link sent for a host ahead of its dial, which takes
// the answer.
type prelinked struct {
	c    childTarget
	pl   *link
	wait <-chan linkAnswer
}

// Prelink sends each host's link to its relay, when the relay is up, so
// that the host's dial starts once the relay has logged in to it: a host
// whose relay is still logging in holds nothing at the launcher, where
// its dial would have held a goroutine and its stack (at 4,096 hosts
// through a tree of width 32, three quarters of the launch's goroutines
// at their peak). The links leave together: the first-level links they
// go through are held (wire.Conn.Hold) while they are sent, one write
// per link instead of one per host. Nothing here waits while they are
// held: a relay is up only once its own dial has ended, so the child
// targets the transport gives (child) are known by then, and a link is
// sent, not answered, here. A write that fails fails the relay's
// stream, which the hosts' dials then meet.
func (t *Tree) Prelink(ctx context.Context, hs []hostfile.Host, ready func(k int)) {
	type hold struct {
		raw   *wire.Conn
		relay string // the first-level host it is the stream of
	}
	var held []hold
	idx := make([]int, len(hs)) // each host's index in the tree, -1 for none
	for k, h := range hs {
		i, ok := t.index[treeKey(h)]
		if !ok {
			i = -1
		}
		idx[k] = i
		if l := t.relayTop(i); l != nil && !slices.ContainsFunc(held, func(x hold) bool { return x.raw == l.raw }) {
			l.raw.Hold()
			held = append(held, hold{l.raw, l.n.h.Name})
		}
	}
	for k, i := range idx {
		t.prelink(ctx, i, func() { ready(k) })
	}
	for _, x := range held {
		if err := x.raw.Release(); err != nil {
			t.log.Debug("links to the hosts behind a first-level host not sent", zap.String("host", x.relay), zap.Error(err))
		}
	}
}

// relayTop is the first-level link that host i's relay is reached
// through, or nil (i is -1, at the first level, or its relay is not up).
func (t *Tree) relayTop(i int) *link {
	if i < 0 || TreeParent(i, t.width) < 0 {
		return nil
	}
	return t.top[TreeParent(i, t.width)].Load()
}

// prelink is Prelink for host i of the tree (-1: a host outside it).
func (t *Tree) prelink(ctx context.Context, i int, ready func()) {
	if i < 0 || TreeParent(i, t.width) < 0 {
		ready()
		return
	}
	n, relay := t.nodes[i], t.nodes[TreeParent(i, t.width)]
	relay.mu.Lock()
	pl := relay.l
	relay.mu.Unlock()
	if pl == nil || !isClosed(pl.facts) {
		ready() // not up: the dial waits for it, or goes around it
		return
	}
	c, err := t.base.child(ctx, n.h)
	if err == nil {
		err = pl.ensureKey(c.User)
	}
	if err != nil {
		ready() // the dial meets the same error and says it
		return
	}
	f := &prelinkFire{ready: ready}
	w := waiter{ch: make(chan linkAnswer, 1), then: f.fire}
	n.mu.Lock()
	n.pre = &prelinked{c: c, pl: pl, wait: w.ch} // before the answer can fire
	n.mu.Unlock()
	if err := t.sendLink(ctx, n, c, relay, pl, w); err != nil {
		n.mu.Lock()
		n.pre = nil
		n.mu.Unlock()
		f.fire()
		return
	}
	f.arm(ctx, c.handshake()+t.relayWait)
}

// prelinkFire calls a Prelink's ready once, on the first of: the answer,
// ctx's end, the timer.
type prelinkFire struct {
	ready func()
	mu    sync.Mutex
	fired bool
	timer *time.Timer
	stop  func() bool
}

func (f *prelinkFire) fire() {
	f.mu.Lock()
	if f.fired {
		f.mu.Unlock()
		return
	}
	f.fired = true
	timer, stop := f.timer, f.stop
	f.mu.Unlock()
	if timer != nil {
		timer.Stop()
		stop()
	}
	f.ready()
}

// arm starts the timer and the hook on ctx, unless fire has run.
func (f *prelinkFire) arm(ctx context.Context, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.fired {
		f.timer = time.AfterFunc(d, f.fire)
		f.stop = context.AfterFunc(ctx, f.fire)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// dialDirect reaches n by the base, as a host of the first level.
func (t *Tree) dialDirect(ctx context.Context, n *node) (io.ReadWriteCloser, string, error) {
	rwc, addr, err := t.base.Dial(ctx, n.h)
	if err != nil {
		return nil, "", err
	}
	l := newLink(n, nil)
	if p, ok := rwc.(AgentPorter); ok {
		l.port = p.AgentPort()
	}
	// Guarded: spread frames and the children's envelopes are written
	// here by others than the host's own session.
	l.raw = wire.NewConn(Guard(rwc))
	l.readers.Go(l.readRaw)
	n.setUp(l)
	return l, addr, nil
}

// dialLinked reaches n through its relay's link pl.
func (t *Tree) dialLinked(ctx context.Context, n *node, c childTarget, relay *node, pl *link) (io.ReadWriteCloser, string, error) {
	if err := pl.ensureKey(c.User); err != nil {
		return nil, "", Permanent(fmt.Errorf("relay %s: %w", relay.h.Name, err))
	}
	w := waiter{ch: make(chan linkAnswer, 1)}
	if err := t.sendLink(ctx, n, c, relay, pl, w); err != nil {
		return nil, "", err
	}
	return t.awaitLinked(ctx, n, c, relay, pl, w.ch)
}

// sendLink asks the relay of link pl to log in to n; the answer goes to
// w.
func (t *Tree) sendLink(ctx context.Context, n *node, c childTarget, relay *node, pl *link, w waiter) error {
	timeout := c.handshake()
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	pl.expect(n.i, w)
	link := wire.Link{Host: n.i, Name: n.h.Name, Addr: c.Addr, User: c.User, TimeoutMS: timeout.Milliseconds(),
		KeepaliveMS: c.Keepalive.Interval.Milliseconds(), KeepaliveTimeoutMS: c.Keepalive.Timeout.Milliseconds(),
		HeartbeatMS: heartbeatInterval.Milliseconds(), HostKeyAlgorithms: c.HostKeyAlgorithms}
	if err := pl.sendMsg(wire.KindLink, link); err != nil {
		pl.unexpect(n.i)
		return fmt.Errorf("through relay %s: %w", relay.h.Name, err)
	}
	return nil
}

// awaitLinked takes the relay's answer to a link for n and checks the
// host key it reports.
func (t *Tree) awaitLinked(ctx context.Context, n *node, c childTarget, relay *node, pl *link, wait <-chan linkAnswer) (io.ReadWriteCloser, string, error) {
	i, h := n.i, n.h
	var ans linkAnswer
	select {
	case ans = <-wait:
	case <-ctx.Done():
		pl.unexpect(i) // a late Linked is unlinked by the reader
		select {
		case ans = <-wait: // in already: unlinked here
			if ans.link != nil {
				ans.link.Close()
			}
		default:
		}
		return nil, "", context.Cause(ctx)
	case <-pl.dead:
		pl.unexpect(i)
		return nil, "", Unreachable(viaRelay(fmt.Errorf("its relay %s was lost: %w", relay.h.Name, pl.cause())))
	}
	if ans.err != nil {
		return nil, "", ans.err
	}
	if a := ans.linked; a.Err != "" {
		switch {
		case a.Refused:
			// The host does not take the job certificate (its
			// authorized_keys holds the user's key with options, or
			// trusts a CA only): the launcher reaches it itself.
			t.refusedOnce.Do(func() {
				t.log.Warn("a host refused the relay's job certificate; the launcher reaches such hosts itself", zap.String("host", h.Name), zap.String("relay", relay.h.Name), zap.String("why", a.Err))
			})
			return t.dialDirect(ctx, n)
		case a.Dial != "":
			// The relay found nothing there, or not the name. The
			// launcher tries the host itself, as a flat launch would:
			// a dead host is then named with the launcher's own error
			// and waited for as the launcher's own attempts are (an
			// mpi-operator worker whose name appears once its pod is
			// up), and a host only the launcher can reach is reached,
			// with one warning: behind jump hosts (a name only the
			// bastion resolves, a network only it routes) through the
			// jumps, else a firewall between the nodes or a name only
			// the launcher resolves.
			rwc, addr, err := t.dialDirect(ctx, n)
			if err == nil {
				why := zap.String("why", dialError(c.Addr, a.Dial, a.DNSName, errors.New(a.Err)).Error())
				if c.Jumped {
					t.jumpOnce.Do(func() {
						t.log.Warn("a relay could not reach a host the launcher reaches through its jump hosts; the launcher reaches such hosts itself", zap.String("host", h.Name), zap.String("relay", relay.h.Name), why)
					})
				} else {
					t.reachOnce.Do(func() {
						t.log.Warn("a relay could not reach a host the launcher reaches; the launcher reaches such hosts itself (a firewall between the nodes, or a name only the launcher resolves? --tree-width 0 keeps the launch flat)", zap.String("host", h.Name), zap.String("relay", relay.h.Name), why)
					})
				}
			}
			return rwc, addr, err
		}
		return nil, "", fmt.Errorf("through relay %s: %s", relay.h.Name, a.Err)
	}
	l := ans.link
	l.port = c.AgentPort
	key, err := ssh.ParsePublicKey(ans.linked.HostKey)
	if err == nil {
		err = t.base.checkChild(c, ans.linked.Addr, key)
	}
	if err != nil {
		l.Close()
		return nil, "", Permanent(fmt.Errorf("%s: host key reached through relay %s: %w", c.Addr, relay.h.Name, err))
	}
	n.setUp(l)
	return l, ans.linked.Addr, nil
}

// PeerAddrs is the base's, where it learns every host's address first
// (the srun transport), else none.
func (t *Tree) PeerAddrs(ctx context.Context) (map[string]string, error) {
	if pa, ok := t.base.(PeerAddresser); ok {
		return pa.PeerAddrs(ctx)
	}
	return nil, nil
}

// Relayed reports whether rwc is the stream of a host reached through a
// relay: its relay pings it (wire.Link.HeartbeatMS).
func Relayed(rwc io.ReadWriteCloser) bool {
	l, ok := rwc.(*link)
	return ok && l.parent != nil
}

// Notifier is a session whose agent's messages wait in the launcher until
// read (every session of the agent tree): Notify has ready called when
// some wait and when the session ends, so that the engine needs no
// goroutine per host blocked on it. ready must not block; the stream is
// a wire.MsgPoller to drain.
type Notifier interface {
	Notify(ready func())
}

// defaultRelayWait is a tree's relayWait.
const defaultRelayWait = 5 * time.Second

// node is one host's place in the tree: its current link, if any.
type node struct {
	t      *Tree
	i      int
	h      hostfile.Host
	mu     sync.Mutex
	l      *link
	up     chan struct{} // closed when l or failed changes (then made anew)
	failed bool          // its last attempt failed for good (ErrPermanent)
	down   error         // its last attempt found nothing there (isDown): the error, else nil
	lost   error         // its link died after its facts came (its dial had ended, and nothing dials it again): why, until a link is up again
	pre    *prelinked    // a link sent ahead of its dial (Prelink)
}

// errRelayFailed: the relay's own dial failed for good (authentication,
// its host key, a name that does not resolve); its children are dialed
// directly. A relay that is only slow or not up yet is waited for, with
// the same start timeout and grace as any host: at thousands of hosts a
// loaded relay must not send its whole subtree to the launcher.
var errRelayFailed = errors.New("relay failed")

// errRelayDown marks the error of a host that waited relayWait for a
// relay that is down (node.down): the host can go around it
// (Tree.SetGoAround).
var errRelayDown = errors.New("relay down")

// relayDownError is the error of a host whose relay is down: unreachable
// for the engine (the wait for hosts where nothing answers applies).
type relayDownError struct{ relay string }

func (e relayDownError) Error() string {
	return fmt.Sprintf("its relay %s is not connected yet", e.relay)
}

func (e relayDownError) Is(target error) bool {
	return target == errRelayDown || target == ErrUnreachable || target == errViaRelay
}

// relayLostError is the error of a host whose relay was reached and then
// lost during the launch (node.lost): nothing will reach the relay again,
// so the host does not wait for it; like a relay that is down, it is
// gone around (Tree.SetGoAround), else the host is unreachable through
// it. The relay itself is then reported lost by the engine, as any host
// whose session ends.
type relayLostError struct {
	relay string
	err   error
}

func (e relayLostError) Error() string {
	if e.err == io.EOF {
		return fmt.Sprintf("its relay %s was lost: connection closed", e.relay)
	}
	return fmt.Sprintf("its relay %s was lost: %v", e.relay, e.err)
}

func (e relayLostError) Is(target error) bool {
	return target == errRelayDown || target == ErrUnreachable || target == errViaRelay
}

// agentSaidError is how a link ended whose agent sent an Error and then
// closed its stream: in the words the launcher uses for an agent's Error.
// It is io.EOF as well (the stream ended).
type agentSaidError struct{ e wire.Error }

func (e agentSaidError) Error() string { return e.e.Why() }

// maxSaid bounds how much of an agent's Error a link keeps: the words go
// into the line of every host its loss cuts off, and an agent chooses
// them. The engine clips the Error it reports at the same length.
const maxSaid = 4 << 10

func (e agentSaidError) Is(target error) bool { return target == io.EOF }

// errViaRelay marks errors that say a host's relay is not up, was lost or
// cut it off: nothing about the host itself, so they do not make the
// host down.
var errViaRelay = errors.New("via its relay")

// viaRelay marks err as about a host's relay, not the host itself.
func viaRelay(err error) error { return viaRelayError{err} }

type viaRelayError struct{ error }

func (e viaRelayError) Unwrap() error        { return e.error }
func (e viaRelayError) Is(target error) bool { return target == errViaRelay }

// isDown reports whether err, a host's own attempt's, says nothing is
// there: nothing listening, no route, a failed lookup, or nothing
// answering a TCP connect (ErrNoAnswer); not a slow login, a refusal, or
// the host's own relay not being up (errViaRelay, CutOffError).
func isDown(err error) bool {
	if err == nil || errors.Is(err, errViaRelay) {
		return false
	}
	var ce *CutOffError
	if errors.As(err, &ce) {
		return false
	}
	return errors.Is(err, ErrUnreachable) || errors.Is(err, ErrNoAnswer)
}

// relays reports whether the node has children in the tree.
func (n *node) relays() bool {
	lo, hi := treeChildren(n.i, n.t.width, len(n.t.hosts))
	return lo < hi
}

// noteErr records the outcome of an attempt to reach the node.
func (n *node) noteErr(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.failed = errors.Is(err, ErrPermanent)
	n.down = nil
	if isDown(err) {
		n.down = err
	}
	if n.failed {
		n.changed()
	}
}

// lastErr is the node's last attempt's error when it found nothing
// there, or how its link was lost after its dial, for a log.
func (n *node) lastErr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.down != nil:
		return n.down.Error()
	case n.lost != nil && n.l == nil:
		return (relayLostError{n.h.Name, n.lost}).Error()
	}
	return ""
}

func (n *node) setUp(l *link) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.l = l
	n.lost = nil
	n.t.top[n.i].Store(l.top())
	n.t.rmu.Lock()
	if l.parent == nil {
		n.t.roots[n.i] = l
	} else {
		delete(n.t.roots, n.i) // reached through a relay now
	}
	n.t.rmu.Unlock()
	n.changed()
}

func (n *node) setDown(l *link) {
	cause := l.cause()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.l == l {
		n.l = nil
		if isClosed(l.facts) {
			// Its facts came, so the engine's dial of it has ended (with
			// them, or ends now) and will not be tried again: hosts
			// waiting for it as their relay would wait in vain.
			n.lost = cause
			if n.lost == nil {
				n.lost = io.EOF
			}
		}
		n.t.top[n.i].Store(nil)
		if l.parent == nil {
			n.t.rmu.Lock()
			if n.t.roots[n.i] == l {
				delete(n.t.roots, n.i)
			}
			n.t.rmu.Unlock()
		}
		n.changed()
	}
}

// changed wakes whoever waits on the node's state. n.mu is held.
func (n *node) changed() {
	close(n.up)
	n.up = make(chan struct{})
}

// waitReady waits up to d for the node's link to be open and its agent to
// have sent its facts (the relay's addresses, for its certificate).
func (n *node) waitReady(ctx context.Context, d time.Duration) (*link, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		n.mu.Lock()
		l, up, failed, lost := n.l, n.up, n.failed, n.lost
		n.mu.Unlock()
		if l == nil && failed {
			return nil, errRelayFailed
		}
		if l == nil && lost != nil {
			return nil, relayLostError{n.h.Name, lost}
		}
		if l != nil {
			// A link that has died is down, facts or not: had both
			// channels been closed, the select below would have taken
			// either, and a child's dial would have gone through a dead
			// relay, failing once where it should go around it.
			if isClosed(l.dead) {
				n.setDown(l)
				continue
			}
			select {
			case <-l.facts:
				return l, nil
			case <-l.dead:
				n.setDown(l)
				continue
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-t.C:
				return nil, Unreachable(viaRelay(fmt.Errorf("its relay %s has not answered yet", n.h.Name)))
			}
		}
		select {
		case <-up:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-t.C:
			n.mu.Lock()
			down := n.l == nil && n.down != nil
			n.mu.Unlock()
			if down {
				return nil, relayDownError{n.h.Name}
			}
			return nil, Unreachable(viaRelay(fmt.Errorf("its relay %s is not connected yet", n.h.Name)))
		}
	}
}

// CutOffError is the session error of a host whose relay was lost: the
// host was cut off, not found faulty.
type CutOffError struct {
	Relay string // the relay lost, nearest the launcher
	Err   error
}

func (e *CutOffError) Error() string {
	return fmt.Sprintf("cut off: its relay %s was lost (%s)", e.Relay, e.Why())
}

// Why is how the relay was lost: "connection closed", or its error.
func (e *CutOffError) Why() string {
	var said agentSaidError
	if errors.As(e.Err, &said) {
		return said.Error()
	}
	if errors.Is(e.Err, io.EOF) {
		return "connection closed"
	}
	return e.Err.Error()
}

func (e *CutOffError) Unwrap() error { return e.Err }

// link is one host's session as the engine sees it: for a host of the
// first level the base's stream (raw), for the others a stream carried in
// envelopes by its relay's link (parent).
type link struct {
	n      *node
	parent *link
	raw    *wire.Conn // first level only

	in inQueue // messages for the engine

	facts chan struct{} // closed once the agent's facts went by
	fonce sync.Once
	addrs []string // the agent's addresses, from its facts
	port  int      // the agent's own port where the transport knows it (AgentPorter), else 0

	mu      sync.Mutex
	kids    map[int]*link  // made at the first child: most links have none
	pending map[int]waiter // made at the first Dial waiting on this relay
	err     error          // why the link ended
	said    wire.Error     // the agent's Error, if it sent one (Msg clipped): why, when its stream then ends
	dead    chan struct{}
	closed  bool

	readers sync.WaitGroup // readRaw, and unlinks of children whose Dial gave up

	kmu     sync.Mutex // held while the relay's key is made and sent
	keyUser string     // the principal of the key this relay holds; "" before
}

type linkAnswer struct {
	linked wire.Linked
	link   *link
	err    error
}

func newLink(n *node, parent *link) *link {
	l := &link{n: n, parent: parent, facts: make(chan struct{}), dead: make(chan struct{})}
	l.in.init()
	return l
}

func (l *link) cause() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// send writes one frame to the link's agent: on its own stream, or in an
// envelope through its relay.
func (l *link) send(k wire.Kind, p []byte) error {
	if l.parent == nil {
		return l.raw.SendMsg(wire.Msg{Kind: k, Payload: p})
	}
	return l.parent.sendEnvelope(l.n.i, k, p)
}

// sendEnvelope writes a frame for the child host through this link.
func (l *link) sendEnvelope(host int, k wire.Kind, p []byte) error {
	if l.parent == nil {
		return l.raw.SendEnvelope(wire.KindRelay, host, k, p)
	}
	return l.parent.sendEnvelope(l.n.i, wire.KindRelay, wire.AppendEnvelope(nil, host, k, p))
}

func (l *link) sendMsg(k wire.Kind, v any) error {
	e, err := wire.Encode(k, v)
	if err != nil {
		return err
	}
	return l.send(k, e.Payload())
}

// errNotBytes is a link's answer to a read or write of bytes: it
// carries whole messages only (wire.MsgStream), which the engine's Conn
// uses.
var errNotBytes = errors.New("a link of the agent tree carries messages, not bytes: read and write it through wire.NewConn")

// Write is refused: see errNotBytes.
func (l *link) Write([]byte) (int, error) { return 0, errNotBytes }

// Read is refused: see errNotBytes.
func (l *link) Read([]byte) (int, error) { return 0, errNotBytes }

// RecvMsg is the next message from the link's agent (wire.MsgStream): the
// engine's Conn reads whole messages, never bytes.
func (l *link) RecvMsg() (wire.Msg, error) { return l.in.recv() }

// PollMsg is the next message from the link's agent if one waits
// (wire.MsgPoller).
func (l *link) PollMsg() (wire.Msg, bool, error) { return l.in.poll() }

// Notify has ready called whenever a message from the link's agent
// waits, and when the link ends (Notifier).
func (l *link) Notify(ready func()) { l.in.notify(ready) }

// SendMsg sends one message to the link's agent (wire.MsgStream).
func (l *link) SendMsg(m wire.Msg) error {
	select {
	case <-l.dead:
		return l.cause()
	default:
	}
	return l.send(m.Kind, m.Payload)
}

// Close ends the link: a first-level host's stream closes (its agent
// closes its children), a linked host is unlinked at its relay.
func (l *link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	if l.parent == nil {
		err := l.raw.Close()
		l.readers.Wait()
		return err
	}
	l.parent.unlinkKid(l)
	_ = l.parent.sendMsg(wire.KindUnlink, wire.Unlink{Host: l.n.i})
	l.fail(io.EOF)
	l.readers.Wait()
	return nil
}

// fail ends the link with err and cuts off every host behind it.
func (l *link) fail(err error) {
	l.mu.Lock()
	select {
	case <-l.dead:
		l.mu.Unlock()
		return
	default:
	}
	if err == io.EOF && l.said.Msg != "" {
		// The agent said why before it closed (it was stopped, say):
		// that is why its link ended, and why its subtree is cut off.
		err = agentSaidError{l.said}
	}
	l.err = err
	close(l.dead)
	kids, pending := l.kids, l.pending
	l.kids, l.pending = nil, nil
	l.mu.Unlock()
	l.n.setDown(l)
	l.in.close(err)
	var cut error = &CutOffError{Relay: l.n.h.Name, Err: err}
	var ce *CutOffError
	if errors.As(err, &ce) {
		cut = err // named after the relay nearest the launcher
	}
	for _, k := range kids {
		k.fail(cut)
	}
	for _, w := range pending {
		w.answer(linkAnswer{err: Unreachable(cut)})
	}
}

func (l *link) unlinkKid(k *link) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kids[k.n.i] == k {
		delete(l.kids, k.n.i)
	}
}

// waiter is a Dial waiting for a host's Linked, and what else to wake
// once it is in (a Prelink's ready), if anything.
type waiter struct {
	ch   chan linkAnswer
	then func()
}

func (w waiter) answer(a linkAnswer) {
	w.ch <- a
	if w.then != nil {
		w.then()
	}
}

// expect registers w for host i's Linked (w.ch is buffered for one
// answer; w.then, if not nil, runs once it is in, or once the link is
// lost, outside the link's lock).
func (l *link) expect(i int, w waiter) {
	l.mu.Lock()
	select {
	case <-l.dead:
		l.mu.Unlock()
		w.answer(linkAnswer{err: Unreachable(&CutOffError{Relay: l.n.h.Name, Err: l.err})})
		return
	default:
		if l.pending == nil {
			l.pending = map[int]waiter{}
		}
		l.pending[i] = w
	}
	l.mu.Unlock()
}

func (l *link) unexpect(i int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pending, i)
}

// ensureKey gives the relay its job certificate once: an ephemeral key,
// certified by each of the user's keys that reach its children, valid from
// the relay's own addresses, for the gangway subsystem, for the job.
func (l *link) ensureKey(user string) error {
	l.kmu.Lock()
	defer l.kmu.Unlock()
	if l.keyUser != "" {
		if l.keyUser != user {
			return fmt.Errorf("its children log in as %s and %s; a relay's certificate names one user (give the hosts one User, or --tree-width 0)", l.keyUser, user)
		}
		return nil
	}
	t := l.n.t
	var signers []ssh.Signer
	seen := map[string]bool{}
	lo, hi := treeChildren(l.n.i, t.width, len(t.hosts))
	for j := lo; j < hi; j++ {
		ss, err := t.base.certSigners(t.hosts[j])
		if err != nil {
			return err
		}
		for _, s := range ss {
			if _, isCert := s.PublicKey().(*ssh.Certificate); isCert {
				continue // a certificate cannot sign one
			}
			if k := string(s.PublicKey().Marshal()); !seen[k] && len(signers) < 8 {
				seen[k] = true
				signers = append(signers, s)
			}
		}
	}
	b, err := jobcert.New(rand.Reader, signers, jobcert.Spec{User: user, JobID: t.jobID, Relay: l.n.h.Name, Sources: l.addrs, Lifetime: t.lifetime, Now: time.Now()})
	if err != nil {
		return fmt.Errorf("job certificate: %w", err)
	}
	if err := l.sendMsg(wire.KindRelayKey, wire.RelayKey{Key: b.Key, Certs: b.Certs, Host: l.n.i}); err != nil {
		return err
	}
	l.keyUser = user
	return nil
}

// readRaw reads a first-level host's stream until it ends.
func (l *link) readRaw() {
	for {
		m, err := l.raw.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.EOF
			}
			l.fail(err)
			return
		}
		if err := l.deliver(m); err != nil {
			l.raw.Close()
			l.fail(err)
			return
		}
	}
}

// deliver handles one frame from the link's agent: an envelope goes to
// the child it names, the relay's answers to its Dials, the rest to the
// engine.
func (l *link) deliver(m wire.Msg) error {
	switch m.Kind {
	case wire.KindRelayed:
		host, inner, err := m.Envelope()
		if err != nil {
			return fmt.Errorf("relay %s: %w", l.n.h.Name, err)
		}
		l.mu.Lock()
		k := l.kids[host]
		l.mu.Unlock()
		if k == nil {
			return nil // an unlinked child's last frames
		}
		if err := k.deliver(inner); err != nil {
			k.fail(err)
		}
		return nil
	case wire.KindLinked:
		var a wire.Linked
		if err := m.Decode(&a); err != nil {
			return err
		}
		l.linked(a)
		return nil
	case wire.KindCut:
		var c wire.Cut
		if err := m.Decode(&c); err != nil {
			return err
		}
		l.mu.Lock()
		k := l.kids[c.Host]
		delete(l.kids, c.Host)
		l.mu.Unlock()
		switch {
		case k == nil:
		case c.SilentMS > 0:
			// What the launcher says of a silent host it holds itself.
			k.fail(fmt.Errorf("relay %s lost it: %w", l.n.h.Name, SilentError{After: time.Duration(c.SilentMS) * time.Millisecond}))
		case c.Err == "":
			k.fail(io.EOF)
		default:
			k.fail(fmt.Errorf("relay %s lost it: %s", l.n.h.Name, c.Err))
		}
		return nil
	case wire.KindFences:
		// The hosts alone: the engine decodes the puts (a barrier's
		// first fences carry every rank's, thousands of keys).
		var hs struct {
			Hosts []int    `json:"hosts"`
			Spans [][2]int `json:"spans"`
		}
		if err := m.Decode(&hs); err != nil {
			return err
		}
		f := wire.Fences{Hosts: hs.Hosts, Spans: hs.Spans}
		if err := f.CheckSpans(len(l.n.t.nodes)); err != nil {
			return fmt.Errorf("protocol violation of relay %s: %w", l.n.h.Name, err)
		}
		bad := -1
		f.Each(func(h int) bool {
			if !l.holds(h) {
				bad = h
			}
			return bad < 0
		})
		if bad >= 0 {
			return fmt.Errorf("protocol violation of relay %s: a fence for host %d, which is not behind it", l.n.h.Name, bad)
		}
	case wire.KindEnds:
		// A relay's hosts that ended cleanly (Hello.Ends): checked as a
		// fence's are; the engine decodes them again, small as they are.
		e, err := m.Ends()
		if err != nil {
			return fmt.Errorf("relay %s: %w", l.n.h.Name, err)
		}
		if err := e.CheckSpans(len(l.n.t.nodes)); err != nil {
			return fmt.Errorf("protocol violation of relay %s: %w", l.n.h.Name, err)
		}
		keep, dropped := make([]int, 0, e.Count()), 0
		e.Each(func(h int) bool {
			if h != l.n.i && l.holds(h) {
				keep = append(keep, h)
			} else {
				dropped++
			}
			return true
		})
		if dropped > 0 {
			// A host unlinked since (the launcher gave up on it, or
			// cut it off) is not this relay's to end any more: the
			// rest of its ends stand.
			l.n.t.log.Debug("ends for hosts not behind their relay dropped", zap.String("relay", l.n.h.Name), zap.Int("hosts", dropped))
			e.Hosts, e.Spans = keep, nil
			p, err := wire.Encode(wire.KindEnds, e)
			if err != nil {
				return err
			}
			m = wire.Msg{Kind: wire.KindEnds, Payload: p.Payload()}
		}
	case wire.KindError:
		var e wire.Error
		if m.Decode(&e) == nil && e.Msg != "" {
			e.Msg = textx.ClipMore(e.Msg, maxSaid)
			l.mu.Lock()
			l.said = e
			l.mu.Unlock()
		}
	case wire.KindGathered:
		// A relay's answers for its subtree (Hello.Gather): the hosts
		// alone, as for fences; the engine decodes the answers, once.
		var g struct {
			Kind  wire.Kind `json:"kind"`
			Hosts []int     `json:"hosts"`
		}
		if err := m.Decode(&g); err != nil {
			return fmt.Errorf("relay %s: %w", l.n.h.Name, err)
		}
		for _, h := range g.Hosts {
			if !l.holds(h) {
				return fmt.Errorf("protocol violation of relay %s: a %s answer for host %d, which is not behind it", l.n.h.Name, g.Kind, h)
			}
		}
	case wire.KindFacts:
		l.fonce.Do(func() {
			// Only a relay's addresses are wanted (its certificate's
			// source-address); a leaf's facts are the engine's alone.
			if l.n.relays() {
				var f wire.Facts
				if m.Decode(&f) == nil {
					l.addrs = factsAddrs(f)
				}
			}
			close(l.facts)
		})
	}
	l.in.push(m)
	return nil
}

// top is the first-level link l is behind (l itself at the first level).
func (l *link) top() *link {
	for l.parent != nil {
		l = l.parent
	}
	return l
}

// holds reports whether host i is this link's own or linked behind it.
// For a link of the first level (every barrier's fences and every
// gathered answer come on one) that is one load from the tree's table
// of first-level links; below it, i's chain of links is walked.
func (l *link) holds(i int) bool {
	if i < 0 || i >= len(l.n.t.nodes) {
		return false
	}
	if l.parent == nil {
		return l.n.t.top[i].Load() == l
	}
	n := l.n.t.nodes[i]
	n.mu.Lock()
	k := n.l
	n.mu.Unlock()
	for ; k != nil; k = k.parent {
		if k == l {
			return true
		}
	}
	return false
}

// Spread sends one frame to every host of the tree in one message per
// first-level link, each relay passing it on to its children: a release
// of a barrier, a stop or a signal costs the launcher as many frames as
// it holds SSH sessions. Only Spreadable kinds.
func (t *Tree) Spread(k wire.Kind, payload []byte) {
	frame := wire.AppendFrame(nil, k, payload)
	roots := t.rootLinks()
	slices.SortFunc(roots, func(a, b *link) int { return a.n.i - b.n.i }) // in the launch's order, as before
	for _, l := range roots {
		if err := l.send(wire.KindSpread, frame); err != nil {
			t.log.Debug("spread failed", zap.String("host", l.n.h.Name), zap.Stringer("kind", k), zap.Error(err))
		}
	}
}

// rootLinks are the links the launcher holds itself now, in no order.
func (t *Tree) rootLinks() []*link {
	t.rmu.Lock()
	defer t.rmu.Unlock()
	roots := make([]*link, 0, len(t.roots))
	for _, l := range t.roots {
		roots = append(roots, l)
	}
	return roots
}

// Hold holds the frames written through every link the launcher holds
// itself (wire.Conn.Hold) until release, which writes each link's in as
// few writes as they fit and says which links failed: a burst for every
// host (the starts) then costs about one packet and system call per
// first-level link, not one per host. Only for one goroutine's burst
// of sends that waits for no answer meanwhile.
func (t *Tree) Hold() (release func() error) {
	roots := t.rootLinks()
	for _, l := range roots {
		l.raw.Hold()
	}
	return func() error {
		var errs []error
		for _, l := range roots {
			if err := l.raw.Release(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", l.n.h.Name, err))
			}
		}
		return errors.Join(errs...)
	}
}

// Covers reports whether h is a host of the tree, which Spread reaches.
func (t *Tree) Covers(h hostfile.Host) bool {
	_, ok := t.index[treeKey(h)]
	return ok
}

// Relays reports whether h relays for other hosts of the tree (it has
// children in the plan; a host whose relay fails is dialed directly,
// and relays for nobody).
func (t *Tree) Relays(h hostfile.Host) bool {
	i, ok := t.index[treeKey(h)]
	return ok && t.nodes[i].relays()
}

// Index is h's index in the tree (the hosts' indices in Fences), -1 when
// h is not in it.
func (t *Tree) Index(h hostfile.Host) int {
	if i, ok := t.index[treeKey(h)]; ok {
		return i
	}
	return -1
}

// linked registers a child the relay reached and wakes its Dial.
func (l *link) linked(a wire.Linked) {
	l.mu.Lock()
	w, ok := l.pending[a.Host]
	delete(l.pending, a.Host)
	var k *link
	if ok && a.Err == "" && a.Host >= 0 && a.Host < len(l.n.t.nodes) && TreeParent(a.Host, l.n.t.width) == l.n.i {
		k = newLink(l.n.t.nodes[a.Host], l)
		if l.kids == nil {
			l.kids = map[int]*link{}
		}
		l.kids[a.Host] = k
	}
	l.mu.Unlock()
	if !ok {
		if a.Err == "" {
			// Its Dial gave up: unlink it, off the reader (a write here
			// could wait on the relay, which may wait on this reader).
			l.readers.Go(func() { _ = l.sendMsg(wire.KindUnlink, wire.Unlink{Host: a.Host}) })
		}
		return
	}
	ans := linkAnswer{linked: a, link: k}
	if a.Err == "" && k == nil {
		ans.err = Permanent(fmt.Errorf("relay %s linked host %d, not its child", l.n.h.Name, a.Host))
	}
	w.answer(ans)
}

// factsAddrs are the addresses a relay may log in to its children from:
// every address of its NICs, and loopback.
func factsAddrs(f wire.Facts) []string {
	addrs := []string{"127.0.0.1", "::1"}
	for _, n := range f.NICs {
		for _, a := range n.Addrs {
			if p, err := netip.ParsePrefix(a); err == nil {
				addrs = append(addrs, p.Addr().String())
			} else if ip, err := netip.ParseAddr(a); err == nil {
				addrs = append(addrs, ip.String())
			}
		}
	}
	return addrs
}

// inQueue holds the messages for the engine, whole, in order; a push
// waits while more than inQueueMax bytes are unread (the relay's stream
// then waits too, as a direct session's would). The engine's Conn takes
// them as they are (wire.MsgStream).
type inQueue struct {
	mu    sync.Mutex
	cond  *sync.Cond
	msgs  []wire.Msg // msgs[head:] are unread
	head  int
	bytes int // payload bytes unread
	err   error
	ready func() // Notify's, called after each push and at the end
}

const inQueueMax = 16 << 20

func (q *inQueue) init() { q.cond = sync.NewCond(&q.mu) }

// push queues m, whose payload (and pooled buffer) the queue owns from
// now on, and tells Notify's function.
func (q *inQueue) push(m wire.Msg) {
	q.mu.Lock()
	for q.bytes > inQueueMax && q.err == nil {
		q.cond.Wait()
	}
	if q.err != nil {
		q.mu.Unlock()
		m.Release()
		return
	}
	q.msgs = append(q.msgs, m)
	q.bytes += len(m.Payload)
	q.cond.Broadcast()
	ready := q.ready
	q.mu.Unlock()
	if ready != nil {
		ready()
	}
}

// notify has ready called now if a message waits or the queue ended, and
// after each later push and at the end.
func (q *inQueue) notify(ready func()) {
	q.mu.Lock()
	q.ready = ready
	now := q.head < len(q.msgs) || q.err != nil
	q.mu.Unlock()
	if now {
		ready()
	}
}

// poll takes the next message if one waits (ok), else says nothing waits
// (ok false, err nil), else, once ended and drained, the end's error.
func (q *inQueue) poll() (m wire.Msg, ok bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == len(q.msgs) {
		return wire.Msg{}, false, q.err
	}
	return q.take(), true, nil
}

// take removes the head message; q.mu held, one waiting.
func (q *inQueue) take() wire.Msg {
	m := q.msgs[q.head]
	q.msgs[q.head] = wire.Msg{}
	q.head++
	if q.head == len(q.msgs) {
		// Drained: a host's queue holds nothing between messages (most
		// hosts' queues are idle most of the job).
		q.msgs, q.head = nil, 0
	}
	q.bytes -= len(m.Payload)
	q.cond.Broadcast()
	return m
}

// recv takes the next message, waiting for one; once the queue is closed
// and drained, its error.
func (q *inQueue) recv() (wire.Msg, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.head == len(q.msgs) && q.err == nil {
		q.cond.Wait()
	}
	if q.head == len(q.msgs) {
		return wire.Msg{}, q.err
	}
	return q.take(), nil
}

func (q *inQueue) close(err error) {
	q.mu.Lock()
	if q.err == nil {
		q.err = err // after what is queued: a host's last words are read
	}
	q.cond.Broadcast()
	ready := q.ready
	q.mu.Unlock()
	if ready != nil {
		ready()
	}
}

// AgentPort is the port the link's agent listens on, where the transport
// knows it (an agent started by srun), else 0: the preflight probes it.
func (l *link) AgentPort() int { return l.port }
