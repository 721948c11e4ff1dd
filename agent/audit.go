package agent

import (
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// maxLogString is how much of a string a client chose (a user name, a
// command, an env name, a certificate's key ID) goes into a log line.
const maxLogString = 64

// clip shortens an untrusted string for the log: at most maxLogString
// bytes, cut at a character boundary, with the full length noted.
func clip(s string) string {
	if len(s) <= maxLogString {
		return s
	}
	cut := maxLogString
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "...(" + strconv.Itoa(len(s)) + " bytes)"
}

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
