package sshd

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// StartupCap caps connections not yet authenticated as sshd's MaxStartups
// start:rate:full does: with fewer than Start in progress a new
// connection is admitted; from Start it is refused with probability Rate
// percent, rising linearly to 100% at Full; at Full and beyond every new
// one is. Start == Full is a hard cap.
type StartupCap struct{ Start, Rate, Full int }

// Defaults of the caps on connections not yet authenticated and of their
// deadlines. MaxStartups is sshd's own default. One address may hold
// half of it: a login node's launchers share its address, and a
// launcher's connection to an agent handshakes in milliseconds.
// LoginGraceTime is the launcher's own handshake timeout, so a handshake
// the launcher still waits for (a slow link, keys tried one by one, a
// home directory on a slow NFS server) is never cut by the agent.
// VersionTimeout: SSH clients send their version line as soon as they
// connect, so 5 s is eight times the round trip of a geostationary
// satellite link (600 ms), yet frees a silent socket four times as fast
// as the login grace.
var (
	DefaultMaxStartups          = StartupCap{Start: 10, Rate: 30, Full: 100}
	DefaultMaxStartupsPerSource = StartupCap{Start: 10, Rate: 30, Full: 50}
)

const (
	DefaultVersionTimeout = 5 * time.Second
	DefaultLoginGraceTime = 20 * time.Second
)

// ParseStartupCap reads "start:rate:full" (sshd's MaxStartups syntax) or
// "N", a hard cap of N.
func ParseStartupCap(s string) (StartupCap, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 1 && len(parts) != 3 {
		return StartupCap{}, fmt.Errorf("%q: want N or start:rate:full (sshd's MaxStartups)", s)
	}
	n := make([]int, len(parts))
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil {
			return StartupCap{}, fmt.Errorf("%q: %q is not a number; want N or start:rate:full", s, p)
		}
		n[i] = v
	}
	if len(n) == 1 {
		n = []int{n[0], 100, n[0]}
	}
	c := StartupCap{Start: n[0], Rate: n[1], Full: n[2]}
	switch {
	case c.Start < 1:
		return c, fmt.Errorf("%q: start must be at least 1", s)
	case c.Rate < 1 || c.Rate > 100:
		return c, fmt.Errorf("%q: rate is a percentage, 1 to 100", s)
	case c.Full < c.Start:
		return c, fmt.Errorf("%q: full must be at least start", s)
	}
	return c, nil
}

func (c StartupCap) String() string {
	if c.Start == c.Full {
		return strconv.Itoa(c.Full)
	}
	return fmt.Sprintf("%d:%d:%d", c.Start, c.Rate, c.Full)
}

// drop decides a new connection's fate when n are in progress, given r,
// uniform in [0, 100): the refusal probability in percent is sshd's
// (integer) one, rate + (100-rate)(n-start)/(full-start).
func (c StartupCap) drop(n, r int) bool {
	switch {
	case n < c.Start:
		return false
	case n >= c.Full:
		return true
	}
	p := c.Rate + (100-c.Rate)*(n-c.Start)/(c.Full-c.Start)
	return r < p
}

// StartupLimits bound the connections that have not finished their SSH
// handshake; zero fields take the defaults.
type StartupLimits struct {
	// MaxStartups caps them in total, MaxStartupsPerSource per source
	// address (sshd's MaxStartups and PerSourceMaxStartups, both
	// start:rate:full here). A connection that either refuses is closed
	// at once, before the SSH banner, unless one whose client has sent
	// nothing yet can make room: the oldest such connection (from the
	// same address, for the per-source cap) is closed instead. Idle
	// sockets then never keep out a client that talks, as SSH clients
	// do as soon as they connect.
	MaxStartups, MaxStartupsPerSource StartupCap
	// VersionTimeout is how long a connection may take to send its SSH
	// version line; LoginGraceTime bounds the time from accept to an
	// authenticated connection (sshd's LoginGraceTime).
	VersionTimeout, LoginGraceTime time.Duration
}

func (l StartupLimits) withDefaults() StartupLimits {
	if l.MaxStartups.Full <= 0 {
		l.MaxStartups = DefaultMaxStartups
	}
	if l.MaxStartupsPerSource.Full <= 0 {
		l.MaxStartupsPerSource = DefaultMaxStartupsPerSource
	}
	if l.VersionTimeout <= 0 {
		l.VersionTimeout = DefaultVersionTimeout
	}
	if l.LoginGraceTime <= 0 {
		l.LoginGraceTime = DefaultLoginGraceTime
	}
	return l
}

// startups tracks the connections that have not finished their SSH
// handshake, oldest first, and admits or refuses new ones (admit), so
// that idle or slow connections can use up neither the agent's file
// descriptors nor its memory, nor keep others out.
type startups struct {
	lim StartupLimits
	// rand returns a number uniform in [0, 100); tests replace it.
	rand func() int

	mu       sync.Mutex
	conns    []*startupConn // in arrival order
	bySource map[string]int

	// Refusals and evictions are logged at most once per refusalLogEvery
	// each, with a count.
	refusedLog, evictedLog limiter
}

const refusalLogEvery = 10 * time.Second

func newStartups(l StartupLimits) *startups {
	return &startups{
		lim: l.withDefaults(), rand: func() int { return rand.IntN(100) }, bySource: map[string]int{},
		refusedLog: limiter{period: refusalLogEvery, burst: 1}, evictedLog: limiter{period: refusalLogEvery, burst: 1},
	}
}

// startupConn is an admitted connection until its handshake ends. It
// notes when the client's version line has come (a newline: x/crypto
// reads the version a byte at a time), and then extends its deadline
// from the version timeout to the login grace time.
type startupConn struct {
	net.Conn
	s     *startups
	src   string
	start time.Time

	// Under s.mu.
	spoke bool // the version line came
	sent  bool // bytes came (read or waiting): never closed to make room
	gone  bool // no longer counted: handshake over, or evicted
}

func (c *startupConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && bytes.IndexByte(b[:n], '\n') >= 0 {
		c.s.spoke(c)
	}
	return n, err
}

// admit counts a new connection from src and returns it wrapped, or nil
// when it is refused. why names the cap (max-startups or
// max-startups-per-source) that refused it or made room for it by
// closing evicted.
func (s *startups) admit(c net.Conn, src string) (sc *startupConn, evicted *startupConn, why string) {
	s.mu.Lock()
	total := s.lim.MaxStartups.drop(len(s.conns), s.rand())
	source := s.lim.MaxStartupsPerSource.drop(s.bySource[src], s.rand())
	if total || source {
		why = "max-startups"
		from := ""
		if source {
			why, from = "max-startups-per-source", src
		}
		if evicted = s.oldestSilent(from); evicted == nil {
			s.mu.Unlock()
			return nil, nil, why
		}
		s.remove(evicted)
	}
	now := time.Now()
	sc = &startupConn{Conn: c, s: s, src: src, start: now}
	s.conns = append(s.conns, sc)
	s.bySource[src]++
	s.mu.Unlock()
	if evicted != nil {
		evicted.Conn.Close()
	}
	_ = c.SetDeadline(now.Add(s.lim.VersionTimeout))
	return sc, evicted, why
}

// oldestSilent is the oldest counted connection (from src, unless "")
// whose client has sent nothing, neither read by the agent nor waiting
// to be. s.mu is held.
func (s *startups) oldestSilent(src string) *startupConn {
	for _, c := range s.conns {
		if c.sent || src != "" && c.src != src {
			continue
		}
		if c.sent = sentAnything(c.Conn); !c.sent {
			return c
		}
	}
	return nil
}

// remove stops counting c. s.mu is held.
func (s *startups) remove(c *startupConn) {
	if c.gone {
		return
	}
	c.gone = true
	for i, o := range s.conns {
		if o == c {
			s.conns = append(s.conns[:i], s.conns[i+1:]...)
			break
		}
	}
	if s.bySource[c.src]--; s.bySource[c.src] <= 0 {
		delete(s.bySource, c.src)
	}
}

// spoke notes c's version line and gives it the rest of the login grace.
func (s *startups) spoke(c *startupConn) {
	s.mu.Lock()
	first := !c.spoke && !c.gone
	c.spoke, c.sent = true, true
	s.mu.Unlock()
	if first {
		_ = c.Conn.SetDeadline(c.start.Add(s.lim.LoginGraceTime))
	}
}

// done ends c's startup: its handshake succeeded or failed.
func (s *startups) done(c *startupConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remove(c)
}

// closeAll closes every connection still in its handshake.
func (s *startups) closeAll() {
	s.mu.Lock()
	conns := append([]*startupConn(nil), s.conns...)
	s.mu.Unlock()
	for _, c := range conns {
		c.Conn.Close()
	}
}

// refused logs a refusal, at most one line every refusalLogEvery with the
// number refused since the last line: a flood of connections must not
// become a flood of log lines.
func (s *startups) refused(log *zap.Logger, src, why string) {
	suppressed, ok := s.refusedLog.allow()
	if !ok {
		return
	}
	log.Warn("refusing connections over the cap on unauthenticated connections",
		zap.String("remote", src), zap.String("cap", why), zap.Stringer("max_startups", s.lim.MaxStartups),
		zap.Stringer("max_startups_per_source", s.lim.MaxStartupsPerSource), zap.Int("refused", suppressed+1))
}

// evicted logs a connection closed to make room, rate-limited as refused.
func (s *startups) evicted(log *zap.Logger, c *startupConn, why string) {
	suppressed, ok := s.evictedLog.allow()
	if !ok {
		return
	}
	log.Warn("closing idle connections (their clients sent nothing) to admit new ones over the cap on unauthenticated connections",
		zap.String("remote", c.src), zap.String("cap", why), zap.Duration("silent_for", time.Since(c.start).Round(time.Millisecond)),
		zap.Stringer("max_startups", s.lim.MaxStartups), zap.Stringer("max_startups_per_source", s.lim.MaxStartupsPerSource),
		zap.Int("closed", suppressed+1))
}

// Set parses a flag's value (ParseStartupCap).
func (c *StartupCap) Set(s string) error {
	v, err := ParseStartupCap(s)
	if err != nil {
		return err
	}
	*c = v
	return nil
}
