package wire

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The agent tree. With --tree-width the launcher holds sessions to the
// first hosts only; each of them (a relay) holds sessions to its children
// and forwards frames between them and its own session, wrapped in
// envelopes that name the child by its index in the launch. An envelope
// may hold an envelope: a frame for a grandchild is wrapped once per
// level, so a relay knows its own children and nothing of the levels
// below them. The relay's own session carries its own frames unwrapped
// beside the envelopes. docs/tree.md is the design.
//
// An envelope's payload is the child's index (4 bytes, big-endian) and
// one whole frame: kind (1 byte), length (4 bytes, big-endian), payload.

// envelopeHeader is an envelope's bytes before its frame's payload.
const envelopeHeader = 4 + 5

// MaxTreeDepth bounds the envelopes inside one another (a depth of 16
// at width 2 is 131,070 hosts).
const MaxTreeDepth = 16

// MaxEnvelope is the longest envelope: the longest frame of any kind
// inside MaxTreeDepth envelopes.
const MaxEnvelope = outputHeader + MaxOutputData + MaxTreeDepth*envelopeHeader

// MaxLinks bounds the children one relay holds at a time.
const MaxLinks = 4096

// MaxLinkTimeout bounds how long a relay tries one child.
const MaxLinkTimeout = 2 * 60 * 1000 // milliseconds

// MaxKeepalive bounds a link's keepalive interval and timeout: a host's
// ssh configuration may let it stall for minutes (ServerAliveInterval x
// ServerAliveCountMax), not for ever.
const MaxKeepalive = 60 * 60 * 1000 // milliseconds

// StallBound is how long a write to a host may make no progress before
// the host is cut off as not reading, where its keepalives go every
// interval and give up after silence: floor, or, when longer, the most
// the keepalives can take to find the host silent (the next keepalive
// within interval, its answer awaited for silence) and one interval
// more. A host allowed to stall that long before it is lost may not read
// for that long either; and a host behind a dead link neither answers
// nor reads: the keepalives, which say what happened, must be first to
// cut it. The launcher bounds its sessions so and a relay its children.
func StallBound(floor, interval, silence time.Duration) time.Duration {
	return max(floor, silence+2*interval)
}

// RelayKey gives a relay what it logs in to its children with: a key made
// for this relay and this job, and the certificates the user's keys made
// of it (internal/jobcert's Bundle), valid only from this relay's
// addresses, only for the gangway subsystem, only until the job's end.
type RelayKey struct {
	Key   []byte   `json:"key"`
	Certs [][]byte `json:"certs"`
	// Host is the relay's own index in the launch, which its combined
	// fences (Fences) name it by.
	Host int `json:"host"`
}

// Fences is a relay's fence for its subtree: every host in Hosts and in
// Spans (indices in the launch: the relay itself, if it runs ranks, and
// the children below it that were given a job) entered barrier Seq, with
// all their puts. A relay sends one when the last of them has entered,
// in place of one Fence per host: one message per subtree per barrier.
// A relay told Hello.FenceSpans names its hosts in Spans, runs of
// consecutive indices, each [first, last], ascending and apart (Compact):
// a subtree's hosts are a few such runs, and the launcher neither decodes
// nor checks them one by one as JSON numbers.
type Fences struct {
	Seq   int               `json:"seq"`
	Hosts []int             `json:"hosts"`
	Spans [][2]int          `json:"spans,omitempty"`
	Puts  map[string]string `json:"puts,omitempty"`
}

// Compact moves Hosts into Spans: sorted, each run of consecutive
// indices one span. A host named twice is named once.
func (f *Fences) Compact() {
	hs := slices.Clone(f.Hosts)
	slices.Sort(hs)
	hs = slices.Compact(hs)
	f.Hosts = nil
	for _, h := range hs {
		if n := len(f.Spans); n > 0 && f.Spans[n-1][1] == h-1 {
			f.Spans[n-1][1] = h
			continue
		}
		f.Spans = append(f.Spans, [2]int{h, h})
	}
}

// CheckSpans says why f's Spans cannot name hosts of a launch of n hosts,
// or nil: each span within 0..n-1, first <= last, and each after the
// one before it with a gap (as Compact makes them). Once checked, the
// spans name at most n hosts, so walking them is bounded by the launch.
func (f Fences) CheckSpans(n int) error {
	next := 0
	for i, s := range f.Spans {
		if s[0] < next || s[0] > s[1] || s[1] >= n {
			return fmt.Errorf("fences: span %d [%d, %d] is not within [%d, %d] in order", i, s[0], s[1], next, n-1)
		}
		next = s[1] + 2
	}
	return nil
}

// Count is how many hosts f names (with a host in Hosts and in Spans
// counted twice); Spans must have passed CheckSpans.
func (f Fences) Count() int {
	n := len(f.Hosts)
	for _, s := range f.Spans {
		n += s[1] - s[0] + 1
	}
	return n
}

// Each calls fn for every host f names, those of Hosts first, then those
// of the Spans in order; Spans must have passed CheckSpans. It stops at
// the first false.
func (f Fences) Each(fn func(host int) bool) {
	for _, h := range f.Hosts {
		if !fn(h) {
			return
		}
	}
	for _, s := range f.Spans {
		for h := s[0]; h <= s[1]; h++ {
			if !fn(h) {
				return
			}
		}
	}
}

// Gathered is a relay's answers of one kind for its subtree (told
// Hello.Gather): Answers[i] is host Hosts[i]'s answer (indices in the
// launch), the JSON the host would have sent alone. A relay gathers the
// answers to what the launcher asks of every host and waits for all
// (Gatherable): one frame a subtree instead of one a host.
type Gathered struct {
	Kind    Kind              `json:"kind"`
	Hosts   []int             `json:"hosts"`
	Answers []json.RawMessage `json:"answers"`
}

// MaxGathered bounds the answers' bytes of one Gathered frame; a relay
// sends a subtree's answers in several frames past it (each answer is at
// most MaxControl).
const MaxGathered = MaxJobControl / 2

// Gatherable reports whether answers of kind k may be gathered: Ready
// (to Start), ProbeResult (to Probe) and Started (to Go).
func Gatherable(k Kind) bool {
	return k == KindReady || k == KindProbeResult || k == KindStarted
}

// Gathered decodes a gathered frame: a gatherable kind, as many answers
// as hosts, each host once and not negative, each answer a JSON object
// (as every gatherable answer is).
func (m Msg) Gathered() (Gathered, error) {
	var g Gathered
	if m.Kind != KindGathered {
		return g, fmt.Errorf("wire: %s frame is not gathered answers", m.Kind)
	}
	if err := m.Decode(&g); err != nil {
		return g, err
	}
	if !Gatherable(g.Kind) {
		return g, fmt.Errorf("wire: gathered answers of kind %s, which is not gathered", g.Kind)
	}
	if len(g.Hosts) != len(g.Answers) || len(g.Hosts) == 0 {
		return g, fmt.Errorf("wire: gathered %d hosts and %d answers", len(g.Hosts), len(g.Answers))
	}
	seen := make(map[int]bool, len(g.Hosts))
	for i, h := range g.Hosts {
		if h < 0 || seen[h] {
			return g, fmt.Errorf("wire: gathered answers name host %d twice or below 0", h)
		}
		seen[h] = true
		if g.Answers[i][0] != '{' { // a RawMessage decoded is a whole JSON value
			return g, fmt.Errorf("wire: host %d's gathered answer is not a JSON object", h)
		}
	}
	return g, nil
}

// Spreadable reports whether a frame of kind k may be spread down a tree
// (KindSpread): the messages the launcher sends every host alike.
func Spreadable(k Kind) bool {
	switch k {
	case KindGo, KindStop, KindSignal, KindFenceDone, KindDump, KindPrepare, KindSelftest, KindPing, KindJob:
		return true
	}
	return false
}

// Spread opens a spread frame: the frame inside, whose payload lies in
// m's, which must fill it exactly, be within its kind's limit and be a
// kind that Spreadable allows.
func (m Msg) Spread() (Msg, error) {
	if m.Kind != KindSpread {
		return Msg{}, fmt.Errorf("wire: %s is not a spread frame", m.Kind)
	}
	p := m.Payload
	if len(p) < 5 {
		return Msg{}, fmt.Errorf("wire: malformed spread (%d bytes)", len(p))
	}
	k, n := Kind(p[0]), binary.BigEndian.Uint32(p[1:])
	if int64(n) != int64(len(p)-5) {
		return Msg{}, fmt.Errorf("wire: malformed spread: its frame says %d bytes, %d follow", n, len(p)-5)
	}
	if !Spreadable(k) {
		return Msg{}, fmt.Errorf("wire: a %s cannot be spread", k)
	}
	if err := checkFrame(k, int64(n)); err != nil {
		return Msg{}, fmt.Errorf("wire: spread holds a bad frame: %w", err)
	}
	return Msg{Kind: k, Payload: p[5:]}, nil
}

// Link asks a relay to open a session to a child: the host's index in
// the launch (the envelopes' name for it), its name, the address and user
// to log in with, and how long to try.
type Link struct {
	Host      int    `json:"host"`
	Name      string `json:"name"`
	Addr      string `json:"addr"` // host:port
	User      string `json:"user"`
	TimeoutMS int64  `json:"timeout_ms"`
	// KeepaliveMS and KeepaliveTimeoutMS are the launcher's own SSH
	// keepalive timing, which the relay keeps with the child (0: 5 s and
	// 15 s), so that a child goes silent as a flat host would.
	KeepaliveMS        int64 `json:"keepalive_ms,omitempty"`
	KeepaliveTimeoutMS int64 `json:"keepalive_timeout_ms,omitempty"`
	// HeartbeatMS is how often the relay pings the child on the
	// launcher's behalf (the launcher pings only the hosts it holds), so
	// the child's --launcher-timeout watchdog hears from its relay; 0:
	// 5 s.
	HeartbeatMS int64 `json:"heartbeat_ms,omitempty"`
	// HostKeyAlgorithms are the host key types to ask the child for, as
	// the launcher would (the types its known_hosts holds for the host);
	// none: the SSH library's default.
	HostKeyAlgorithms []string `json:"host_key_algorithms,omitempty"`
}

// Validate checks what a relay relies on before dialling.
func (l Link) Validate() error {
	if l.Host < 0 || l.Host > 1<<30 {
		return fmt.Errorf("link: host index %d out of range", l.Host)
	}
	host, port, err := net.SplitHostPort(l.Addr)
	if err != nil || host == "" {
		return fmt.Errorf("link: address %.80q is not host:port", l.Addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("link: bad port in %.80q", l.Addr)
	}
	if l.User == "" || len(l.User) > 256 || len(l.Name) > MaxNameLen {
		return errors.New("link: user or name empty or too long")
	}
	if l.TimeoutMS <= 0 || l.TimeoutMS > MaxLinkTimeout {
		return fmt.Errorf("link: timeout %d ms outside (0, %d]", l.TimeoutMS, MaxLinkTimeout)
	}
	if len(l.HostKeyAlgorithms) > 32 {
		return errors.New("link: more than 32 host key algorithms")
	}
	if l.HeartbeatMS < 0 || l.HeartbeatMS > MaxLinkTimeout {
		return fmt.Errorf("link: heartbeat %d ms outside [0, %d]", l.HeartbeatMS, MaxLinkTimeout)
	}
	if l.KeepaliveMS < 0 || l.KeepaliveMS > MaxKeepalive || l.KeepaliveTimeoutMS < 0 || l.KeepaliveTimeoutMS > MaxKeepalive {
		return fmt.Errorf("link: keepalive %d ms / %d ms outside [0, %d]", l.KeepaliveMS, l.KeepaliveTimeoutMS, MaxKeepalive)
	}
	return nil
}

// Linked answers a Link: the child's session is open (Err empty), or why
// not. HostKey is the key the child's server offered (ssh wire format):
// the launcher checks it against its known hosts before it sends the
// child anything, and unlinks it if it does not match.
type Linked struct {
	Host    int    `json:"host"`
	Addr    string `json:"addr,omitempty"` // the IP the relay reached
	HostKey []byte `json:"host_key,omitempty"`
	Err     string `json:"err,omitempty"`
	// Dial says why the TCP connection failed, for the launcher to word
	// as it words its own: DialRefused, DialNoRoute, DialNoSuchHost
	// (DNSName does not resolve), DialDNS (DNSName's lookup failed for
	// now), DialTimeout; "" for anything else (Err says it).
	Dial    string `json:"dial,omitempty"`
	DNSName string `json:"dns_name,omitempty"`
	// Refused: the child's agent refused the job certificate (or has no
	// gangway subsystem): the launcher reaches that host itself.
	Refused bool `json:"refused,omitempty"`
}

// Why a relay's TCP connection to a child failed (Linked.Dial).
const (
	DialRefused    = "refused"
	DialNoRoute    = "no-route"
	DialNoSuchHost = "no-such-host"
	DialDNS        = "dns"
	DialTimeout    = "timeout"
)

// HandshakeWhy words why an SSH login to an agent failed, for "ADDR: ssh
// handshake failed: WHY", alike for the launcher's own logins and a
// relay's: without x/crypto/ssh's "ssh: handshake failed: " and "ssh: "
// prefixes, and, where the other end closed the connection mid-login
// (the stream's end, a reset, or this end's socket closed after a write
// to it failed), saying so and what closes logins at an agent.
func HandshakeWhy(err error) string {
	why := strings.TrimPrefix(strings.TrimPrefix(err.Error(), "ssh: handshake failed: "), "ssh: ")
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) {
		return "the agent closed the connection during the login (" + why + "); an agent closes logins past its --version-timeout or --login-grace-time, and new ones beyond its --max-startups"
	}
	return why
}

// Unlink closes a child's session (the launcher is done with it, or
// refused its host key).
type Unlink struct {
	Host int `json:"host"`
}

// Cut says a child's session ended: Err empty when the child closed it,
// else why the relay lost it.
type Cut struct {
	Host int    `json:"host"`
	Err  string `json:"err,omitempty"`
	// SilentMS: the child answered no keepalive for this long.
	SilentMS int64 `json:"silent_ms,omitempty"`
}

// SendEnvelope writes an envelope of kind k (KindRelay or KindRelayed)
// holding the frame (inner, payload) of host.
func (c *Conn) SendEnvelope(k Kind, host int, inner Kind, payload []byte) error {
	if k != KindRelay && k != KindRelayed {
		return fmt.Errorf("wire: %s is not an envelope", k)
	}
	if err := checkFrame(inner, int64(len(payload))); err != nil {
		return err
	}
	var h [envelopeHeader]byte
	binary.BigEndian.PutUint32(h[:4], uint32(host))
	h[4] = byte(inner)
	binary.BigEndian.PutUint32(h[5:], uint32(len(payload)))
	return c.write(k, h[:], payload)
}

// AppendEnvelope appends the payload of an envelope holding (inner,
// payload) for host to dst: what SendEnvelope sends after its own header.
func AppendEnvelope(dst []byte, host int, inner Kind, payload []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(host))
	return AppendFrame(dst, inner, payload)
}

// AppendFrame appends one whole frame (header and payload) to dst.
func AppendFrame(dst []byte, k Kind, payload []byte) []byte {
	dst = append(dst, byte(k))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...)
}

// Envelope opens an envelope: the host it is for or from, and the frame
// inside, whose payload lies in m's. The frame must fill the envelope
// exactly and be within its own kind's limit.
func (m Msg) Envelope() (host int, inner Msg, err error) {
	if m.Kind != KindRelay && m.Kind != KindRelayed {
		return 0, Msg{}, fmt.Errorf("wire: %s is not an envelope", m.Kind)
	}
	p := m.Payload
	if len(p) < envelopeHeader {
		return 0, Msg{}, fmt.Errorf("wire: malformed %s (%d bytes)", m.Kind, len(p))
	}
	host = int(binary.BigEndian.Uint32(p))
	k, n := Kind(p[4]), binary.BigEndian.Uint32(p[5:])
	if int64(n) != int64(len(p)-envelopeHeader) {
		return 0, Msg{}, fmt.Errorf("wire: malformed %s: its frame says %d bytes, %d follow", m.Kind, n, len(p)-envelopeHeader)
	}
	if err := checkFrame(k, int64(n)); err != nil {
		return 0, Msg{}, fmt.Errorf("wire: %s holds a bad frame: %w", m.Kind, err)
	}
	if host > 1<<30 {
		return 0, Msg{}, fmt.Errorf("wire: %s for host %d out of range", m.Kind, host)
	}
	return host, Msg{Kind: k, Payload: p[envelopeHeader:]}, nil
}

// SendMsg writes a received frame again, unchanged: a relay passes a
// child's frame on with it.
func (c *Conn) SendMsg(m Msg) error { return c.write(m.Kind, nil, m.Payload) }

// Ends is how a host told Hello.Ends says that a job's ranks ended. A
// host whose every rank exited 0 (code 0, no signal, no error) or was
// stopped by the launcher sends Self in place of those exits and of its
// Done: the launcher needs a rank's exit only when it failed (blame,
// spares, the report). A host any of whose ranks failed sends every
// exit as it comes (those that waited before the first failure with it)
// and then Done. A relay
// holds its own and its children's ends and sends them up in one frame
// for its subtree (Hosts, or Spans when told Hello.FenceSpans, as its
// fences name them), once the subtree has ended or after a short wait.
// A relay's frames reach the launcher in the order it read them, so a
// host's Ends comes after the output and the frames its relay forwarded
// before it.
type Ends struct {
	// Self: every rank of the sender's own job exited 0, or was ended by
	// the launcher (its stop, a dump's signal: an Exit marked Stopped,
	// which the launcher does not blame), and the job's resources are
	// released.
	Self bool `json:"self,omitempty"`
	// Done: the sender's own job ended, not all of it with 0: its exits
	// went as they came, and this is its Done.
	Done bool `json:"done,omitempty"`
	// Hosts and Spans: hosts behind the sender (indices in the launch)
	// that ended as Self says; ascending, each once.
	Hosts []int    `json:"hosts,omitempty"`
	Spans [][2]int `json:"spans,omitempty"`
	// Stopped: how many of the ranks this frame ends (the sender's own,
	// when Self, and those of the hosts named) were ended by the
	// launcher (an Exit marked Stopped) rather than by their own exit 0,
	// for the launcher's count of the ranks its stop ended.
	Stopped int `json:"stopped,omitempty"`
	// Last: nothing of the sender's subtree ends after this frame: the
	// sender's own end was said (here or in an earlier frame) if it ran
	// ranks, and every child it passed a start to has sent its Last or
	// was lost. Its relay reads it; the launcher does not need it.
	Last bool `json:"last,omitempty"`
}

// hosts is e's hosts as a Fences, for CheckSpans, Count and Each.
func (e Ends) hosts() Fences { return Fences{Hosts: e.Hosts, Spans: e.Spans} }

// CheckSpans is Fences.CheckSpans for e's Spans, in a launch of n hosts.
func (e Ends) CheckSpans(n int) error { return e.hosts().CheckSpans(n) }

// Count is how many hosts behind the sender e names; Spans must have
// passed CheckSpans.
func (e Ends) Count() int { return e.hosts().Count() }

// Each calls fn for every host behind the sender that e names, as
// Fences.Each does.
func (e Ends) Each(fn func(host int) bool) { e.hosts().Each(fn) }

// Ends decodes an ends frame: not both Self and Done, Stopped not
// negative, Hosts ascending and not negative, Spans ascending and apart from 0 (the launcher
// checks them against its launch: CheckSpans).
func (m Msg) Ends() (Ends, error) {
	var e Ends
	if m.Kind != KindEnds {
		return e, fmt.Errorf("wire: %s frame is not ends", m.Kind)
	}
	if err := m.Decode(&e); err != nil {
		return e, err
	}
	if e.Self && e.Done {
		return e, errors.New("wire: ends: both self and done")
	}
	if e.Stopped < 0 {
		return e, fmt.Errorf("wire: ends: %d ranks stopped", e.Stopped)
	}
	for i, h := range e.Hosts {
		if h < 0 || (i > 0 && h <= e.Hosts[i-1]) {
			return e, fmt.Errorf("wire: ends: host %d out of order, repeated or below 0", h)
		}
	}
	if err := e.CheckSpans(1 << 30); err != nil { // any launch's bound: no overflow past it
		return e, fmt.Errorf("wire: ends: %w", err)
	}
	return e, nil
}
