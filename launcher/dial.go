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
	idx   int
	host  hostfile.Host
	conn  *wire.Conn
	addr  string
	facts wire.Facts
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

// dialAll connects to every host concurrently, retrying with backoff until
// timeout, and says while waiting which hosts are still missing. It
// returns every session or, at the deadline, an error naming each missing
// host and why.
func dialAll(ctx context.Context, log *zap.Logger, hosts []hostfile.Host, local, remote Dialer, hello func(i int) wire.Hello, timeout time.Duration) ([]*session, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sessions := make([]*session, len(hosts))
	var mu sync.Mutex
	lastErr := make(map[int]error)
	var wg sync.WaitGroup
	for i, h := range hosts {
		d := remote
		if isLocal(h) {
			d = local
		}
		wg.Go(func() {
			backoff := 50 * time.Millisecond
			for {
				s, err := dialOne(ctx, d, i, h, hello(i))
				if err == nil {
					mu.Lock()
					sessions[i] = s
					delete(lastErr, i)
					mu.Unlock()
					return
				}
				mu.Lock()
				lastErr[i] = err
				mu.Unlock()
				if errors.Is(err, ErrPermanent) || d == nil {
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(backoff*2, 2*time.Second)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(3 * time.Second)
	defer tick.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-tick.C:
			mu.Lock()
			var missing []string
			for i, err := range lastErr {
				missing = append(missing, fmt.Sprintf("%s (%v)", hosts[i].Name, err))
			}
			mu.Unlock()
			sort.Strings(missing)
			if len(missing) > 0 {
				// Warn, not Info: the launcher logs warnings by default, and
				// users must see which hosts they are waiting for.
				log.Warn("waiting for hosts", zap.Int("missing", len(missing)), zap.String("hosts", strings.Join(missing, ", ")))
			}
		}
	}
	var errs []error
	for i := range hosts {
		if sessions[i] == nil {
			err := lastErr[i]
			if err == nil {
				err = ctx.Err()
			}
			errs = append(errs, &HostError{Host: hosts[i].Name, Err: err})
		}
	}
	if len(errs) > 0 {
		for _, s := range sessions {
			if s != nil {
				s.conn.Close()
			}
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("hosts not reachable within --start-timeout %v: %w", timeout, errors.Join(errs...))
		}
		return nil, fmt.Errorf("cannot reach every host: %w", errors.Join(errs...))
	}
	return sessions, nil
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
	return &session{idx: i, host: h, conn: conn, addr: addr, facts: f}, nil
}
