package transport

import (
	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/launcher/plan"
)

// The in-process transport: a job's local host (plan.Local, this machine)
// is served by an agent running in the launcher's own process, over a
// socketpair. cmd/launcher builds it (Local), so that no launcher package
// imports the agent's; it is a Dialer like the others, and the job sees
// no difference.

// Local builds the in-process agent's Dialer once the logger exists.
type Local func(log *zap.Logger) Dialer

// Dialers are a launch's ways to its hosts: the in-process agent for the
// local host, the configured transport (New) for the others.
type Dialers struct {
	Local  Dialer // nil: no in-process agent (a local host cannot be reached)
	Remote Dialer
}

// For is the Dialer that reaches h.
func (d Dialers) For(h hostfile.Host) Dialer {
	if plan.IsLocal(h) {
		return d.Local
	}
	return d.Remote
}

// PeerName is the name the other hosts reach h by: what its Dialer says
// (the agent transport: the HostName the ssh configuration gives h's
// name), else h's name.
func (d Dialers) PeerName(h hostfile.Host) string {
	if pn, ok := d.For(h).(interface{ PeerName(hostfile.Host) string }); ok {
		return pn.PeerName(h)
	}
	return h.Name
}
