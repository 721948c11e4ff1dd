// Package transport is how the launcher reaches the hosts' agents: one
// Dialer interface, whose Dial opens the protocol stream (wire.Conn's
// bytes) to the agent on a host, and one constructor, New, for the kind
// --transport names (Kind). Each kind is a file and one line in kinds
// (transport.go): the agents' own listeners over x/crypto/ssh (agent.go,
// with known_hosts in knownhosts.go), 'agent --stdio' through the system
// ssh (sshexec.go), one 'agent --srun' per node from one srun step
// (slurm.go); the in-process agent for the local host is built by
// cmd/launcher (local.go). What every stream shares: SSH connections and
// their keepalives (sshconn.go, keepalive.go), the protocol heartbeat,
// and the guard that cuts off an agent that stops reading (stall.go).
//
// It imports agent/wire for the protocol's few transport-level words and
// the vocabulary in launcher/plan; no other launcher package (the command
// line builds Options, the engine uses the Dialers), nothing else of the
// agent's.
package transport
