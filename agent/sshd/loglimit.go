package sshd

import (
	"sync"
	"time"
)

// limiter lets through at most burst log lines per period and counts
// the rest, so that a flood of refused connections or logins cannot
// become a flood of log lines.
type limiter struct {
	period time.Duration
	burst  int

	mu         sync.Mutex
	start      time.Time // of the current period
	n          int       // lines let through in it
	suppressed int       // since the last line let through
}

// allow says whether a line may be written now and, if so, how many were
// suppressed since the last one (to be said in it).
func (l *limiter) allow() (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Sub(l.start) >= l.period {
		l.start, l.n = now, 0
	}
	if l.n >= l.burst {
		l.suppressed++
		return 0, false
	}
	l.n++
	suppressed, l.suppressed = l.suppressed, 0
	return suppressed, true
}
