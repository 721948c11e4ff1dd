package launcher

import (
	"gangway/launcher/rankenv"
	"gangway/launcher/transport"
)

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
	return rankenv.Host{Host: s.host, Reached: s.addr, Facts: s.facts}
}

// views are the sessions' hosts as the pipeline sees them, in order.
func views(sessions []*session) []rankenv.Host {
	out := make([]rankenv.Host, len(sessions))
	for i, s := range sessions {
		out[i] = s.view()
	}
	return out
}
