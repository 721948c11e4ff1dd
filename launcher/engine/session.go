package engine

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/launcher/rankenv"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// session is one host's open protocol stream.
type session struct {
	idx      int
	host     hostfile.Host
	conn     *wire.Conn
	addr     string
	peer     string // how the other agents were told of this host (rankenv.Host.Peer)
	port     int    // the agent's port when its connection says (transport.AgentPorter), else 0
	facts    wire.Facts
	stopBeat func()

	// said is the last error the agent sent (its reader sets it), and
	// readDone closes when the reader has returned.
	said     atomic.Pointer[string]
	readDone chan struct{}

	// A session of the agent tree (notify not nil) is read by drains
	// started when messages wait (job.ready): draining while one runs,
	// pending when messages arrived since its last look, readOver once
	// the session is read no more.
	notify   transport.Notifier
	draining atomic.Bool
	pending  atomic.Bool
	readOver atomic.Bool
	// ended: its relay's Ends says the host ended cleanly while its own
	// messages still waited: its drain sends the end once they are
	// handled (job.endedHosts).
	ended atomic.Bool
}

// sendFailed is the error of a send to s that failed with err: the
// agent's own reason when it gave one before closing the session (a
// session closed by its agent, for --start-job-timeout say, fails the
// next send with a bare EOF while the reason waits unread), else err.
// It waits up to a second for the reader to reach the session's end.
func (s *session) sendFailed(what string, err error) error {
	if s.readDone != nil {
		select {
		case <-s.readDone:
		case <-time.After(time.Second):
		}
	}
	if m := s.said.Load(); m != nil {
		return &hostError{Host: s.host.Name, Err: errors.New(*m)}
	}
	if err == io.EOF {
		err = closedError{err} // the words the launcher uses for a lost agent
	}
	return &hostError{Host: s.host.Name, Err: fmt.Errorf("%s: %w", what, err)}
}

// closedError is a bare io.EOF said as "connection closed", as the
// launcher says of an agent lost mid-job; it is still io.EOF.
type closedError struct{ error }

func (closedError) Error() string   { return "connection closed" }
func (e closedError) Unwrap() error { return e.error }

// close ends the session: the connection, then the heartbeat (whose
// send, blocked on an agent that stopped reading, the close ends).
func (s *session) close() {
	s.conn.Close()
	s.stopBeat()
}

// hostError says which host failed and how.
type hostError struct {
	Host string
	Err  error
}

func (e *hostError) Error() string { return fmt.Sprintf("host %s: %v", e.Host, e.Err) }

func (e *hostError) Unwrap() error { return e.Err }

// label names a host as the launcher knows it, with the agent's own name
// when that differs: "198.18.0.2 (h1)".
func label(s *session) string {
	if n := s.facts.Name; n != "" && n != s.host.Name {
		return s.host.Name + " (" + n + ")"
	}
	return s.host.Name
}

// probePort is the port the preflight dials on s's host, and whether it
// is a stock sshd's (a fork per connection): the agent's own probe port
// when it offers one, else the port its session came in on (the agent's,
// or sshd's for --transport ssh).
func probePort(t transport.Options, s *session) (port int, sshd bool) {
	switch {
	case s.facts.ProbePort > 0:
		return s.facts.ProbePort, false
	case s.port != 0:
		return s.port, false
	}
	return t.ProbePort(s.host)
}

// view is s as the rank-environment pipeline sees it.
func (s *session) view() rankenv.Host {
	return rankenv.Host{Host: s.host, Reached: s.addr, Peer: s.peer, Facts: s.facts}
}

// views are the sessions' hosts as the pipeline sees them, in order.
func views(sessions []*session) []rankenv.Host {
	out := make([]rankenv.Host, len(sessions))
	for i, s := range sessions {
		out[i] = s.view()
	}
	return out
}
