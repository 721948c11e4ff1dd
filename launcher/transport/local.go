package transport

import (
	"context"

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

// Prelink starts what hs's dials will wait for where their Dialer can
// (Prelinker), each Dialer's hosts together, and calls ready(k) once for
// hs[k] when its dial may start: at once for a host whose Dialer
// starts nothing ahead.
func (d Dialers) Prelink(ctx context.Context, hs []hostfile.Host, ready func(k int)) {
	var local, remote []int
	for k, h := range hs {
		switch _, ok := d.For(h).(Prelinker); {
		case !ok:
			ready(k)
		case plan.IsLocal(h):
			local = append(local, k)
		default:
			remote = append(remote, k)
		}
	}
	for _, g := range []struct {
		d  Dialer
		ks []int
	}{{d.Local, local}, {d.Remote, remote}} {
		if len(g.ks) == 0 {
			continue
		}
		sub := make([]hostfile.Host, len(g.ks))
		for j, k := range g.ks {
			sub[j] = hs[k]
		}
		g.d.(Prelinker).Prelink(ctx, sub, func(j int) { ready(g.ks[j]) })
	}
}
