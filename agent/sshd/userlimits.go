package sshd

import (
	"fmt"
	"sync"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/account"
)

// UserLimits cap what one user (one uid) may hold on an agent at once,
// over all of that user's connections, so that one user of a shared
// agent cannot use up its file descriptors, memory or processes and keep
// the others out. Zero fields take the defaults.
type UserLimits struct {
	// MaxUserConnections caps authenticated connections. One over it is
	// kept only to refuse its channels, naming the limit, and is closed.
	MaxUserConnections int
	// MaxUserSessions caps open session channels (commands, shells,
	// launcher sessions), as MaxSessions does per connection.
	MaxUserSessions int
	// MaxUserJobs caps launcher sessions that were sent a job (StartJob):
	// each has a supervisor, a process of the agent's user that the
	// user's own process limit does not count. One over it is refused in
	// Ready, naming the limit.
	MaxUserJobs int
}

// Defaults of UserLimits. A launcher's job holds one connection and one
// session on each of its hosts, and so does Open MPI's mpirun (one
// orted login per host); 32 jobs at once is four jobs per GPU of an
// 8-GPU node, or a sweep of small CPU jobs. Connections and sessions
// leave room beside them for interactive logins and tools that open a
// few sessions per connection. A user at every limit, with one-rank
// jobs, held 234 of the agent's descriptors (a connection takes one, a
// job five, more with more ranks), 16 MiB more of its memory and 50 MiB
// (PSS) in the jobs' supervisors (TestUserFlood).
const (
	DefaultMaxUserConnections = 64
	DefaultMaxUserSessions    = 128
	DefaultMaxUserJobs        = 32
)

func (l UserLimits) withDefaults() UserLimits {
	if l.MaxUserConnections <= 0 {
		l.MaxUserConnections = DefaultMaxUserConnections
	}
	if l.MaxUserSessions <= 0 {
		l.MaxUserSessions = DefaultMaxUserSessions
	}
	if l.MaxUserJobs <= 0 {
		l.MaxUserJobs = DefaultMaxUserJobs
	}
	return l
}

// userResource is what UserLimits count.
type userResource int

const (
	userConnections userResource = iota
	userSessions
	userJobs
)

func (r userResource) String() string {
	return [...]string{"connections", "sessions", "jobs"}[r]
}

// UserLimitError refuses what would take a user over one of UserLimits.
type UserLimitError struct {
	User     string
	Resource string // connections, sessions or jobs
	Max      int
}

func (e *UserLimitError) Error() string {
	return fmt.Sprintf("too many %s for user %s on this host (at most %d, the agent's --max-user-%s)", e.Resource, e.User, e.Max, e.Resource)
}

// users counts what each user holds against UserLimits.
type users struct {
	lim UserLimits
	log *zap.Logger

	mu   sync.Mutex
	held map[uint32]*[3]int

	refusedLog limiter
}

func newUsers(l UserLimits, log *zap.Logger) *users {
	return &users{lim: l.withDefaults(), log: log, held: map[uint32]*[3]int{},
		refusedLog: limiter{period: refusalLogEvery, burst: authLogBurst}}
}

func (u *users) max(r userResource) int {
	switch r {
	case userConnections:
		return u.lim.MaxUserConnections
	case userSessions:
		return u.lim.MaxUserSessions
	}
	return u.lim.MaxUserJobs
}

// acquire takes one r for a, or refuses with a *UserLimitError (logged,
// rate-limited). release gives it back; calling it again does nothing.
func (u *users) acquire(a *account.Account, r userResource) (release func(), err error) {
	u.mu.Lock()
	h := u.held[a.Uid]
	if h == nil {
		h = &[3]int{}
		u.held[a.Uid] = h
	}
	if h[r] >= u.max(r) {
		u.mu.Unlock()
		err := &UserLimitError{User: a.Name, Resource: r.String(), Max: u.max(r)}
		if suppressed, ok := u.refusedLog.allow(); ok {
			u.log.Warn("refused over a per-user limit", zap.String("user", a.Name), zap.Uint32("uid", a.Uid),
				zap.String("limit", "max-user-"+r.String()), zap.Int("max", u.max(r)), zap.Int("suppressed", suppressed))
		}
		return nil, err
	}
	h[r]++
	u.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			u.mu.Lock()
			defer u.mu.Unlock()
			if h[r]--; *h == [3]int{} {
				delete(u.held, a.Uid)
			}
		})
	}, nil
}
