package agent

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// startups counts the connections that have not finished their SSH
// handshake, in total and per source address, and refuses those over the
// caps before the handshake, so idle or slow connections cannot use up
// the agent's file descriptors or memory.
type startups struct {
	mu        sync.Mutex
	max       int
	perSource int
	total     int
	bySource  map[string]int

	// Refusals are logged at most every refusalLogEvery, with a count.
	log limiter
}

const refusalLogEvery = 10 * time.Second

// init sets the caps (0: the defaults) once, before the first admit.
func (s *startups) init(max, perSource int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bySource != nil {
		return
	}
	s.max, s.perSource = max, perSource
	if s.max <= 0 {
		s.max = DefaultMaxStartups
	}
	if s.perSource <= 0 {
		s.perSource = DefaultMaxStartupsPerSource
	}
	s.bySource = map[string]int{}
	s.log = limiter{period: refusalLogEvery, burst: 1}
}

// admit counts a new connection from src, or says why it is refused.
func (s *startups) admit(src string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.total >= s.max:
		return "max-startups"
	case s.bySource[src] >= s.perSource:
		return "max-startups-per-source"
	}
	s.total++
	s.bySource[src]++
	return ""
}

// done ends an admitted connection's startup (its handshake succeeded or
// failed).
func (s *startups) done(src string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if s.bySource[src]--; s.bySource[src] <= 0 {
		delete(s.bySource, src)
	}
}

// refused logs a refusal, at most one line every refusalLogEvery with the
// number refused since the last line: a flood of connections must not
// become a flood of log lines.
func (s *startups) refused(log *zap.Logger, src, why string) {
	suppressed, ok := s.log.allow()
	if !ok {
		return
	}
	s.mu.Lock()
	max, perSource := s.max, s.perSource
	s.mu.Unlock()
	log.Warn("refusing connections over the cap on unauthenticated connections",
		zap.String("remote", src), zap.String("cap", why), zap.Int("max_startups", max),
		zap.Int("max_startups_per_source", perSource), zap.Int("refused", suppressed+1))
}
