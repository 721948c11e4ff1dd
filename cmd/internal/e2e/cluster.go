// Package e2e runs the launcher against agents for gangway's end-to-end
// tests: in-process (Start, Run, Cluster.StartLauncher,
// Cluster.RunLauncher: launcher.Main in a goroutine) or as a real process
// (StartProc with BuildBinaries' launcher), against in-process agents
// (StartLocal, from agent/agenttest) or real bin/agent processes
// (StartProcs).
//
// Clusters are agenttest's: a block of loopback addresses 127.0.B.x per
// cluster and an ephemeral port per agent, so host lists carry the port:
// HostList gives "127.0.B.1:2:PORT,...".
//
// It lives under cmd/ because it imports the launcher: nothing under
// agent/ may.
package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/agent/agenttest"
)

// Deadline bounds every wait of this package (agenttest's).
const Deadline = agenttest.Deadline

// Cluster is a set of agents as the launcher sees them.
type Cluster struct {
	*agenttest.Cluster
	// Procs holds each host's agent process, for StartProcs' clusters.
	Procs []*Proc
}

// StartLocal starts n agents in this process (agenttest.StartLocal).
func StartLocal(t testing.TB, n int, opts ...agenttest.Option) *Cluster {
	t.Helper()
	return &Cluster{Cluster: agenttest.StartLocal(t, n, opts...)}
}

// HostList is the -H value giving every agent slots slots:
// "127.0.B.1:S:PORT,127.0.B.2:S:PORT,...".
func (c *Cluster) HostList(slots int) string {
	e := make([]string, len(c.Hosts))
	for i, h := range c.Hosts {
		e[i] = fmt.Sprintf("%s:%d:%d", h.Addr, slots, h.Port)
	}
	return strings.Join(e, ",")
}

// SSHFlags are the launcher options that reach this cluster: the client
// key and the cluster's known_hosts.
func (c *Cluster) SSHFlags() []string {
	return []string{"-i", c.Keys.ClientKey, "--known-hosts", c.KnownHosts}
}
