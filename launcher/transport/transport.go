package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/hostfile"
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

// PeerAddresser is a Dialer that learns every host's address before any
// session starts (the srun transport: each agent reports the address it
// listens on). The agents then look their peers up by those addresses
// rather than by host names, which need not resolve anywhere (Slurm's
// NodeName is a label; its NodeAddr is the address).
type PeerAddresser interface {
	// PeerAddrs waits until every host has reported and returns each
	// host's address (an IP literal) by host name.
	PeerAddrs(ctx context.Context) (map[string]string, error)
}

// AgentPorter is a stream that knows the port its agent listens on (an
// agent started by srun listens on an ephemeral one): the preflight
// probes that port.
type AgentPorter interface{ AgentPort() int }

// Kind is a transport: how the launcher reaches the hosts' agents
// (--transport).
type Kind string

// The transports.
const (
	Agent Kind = "agent" // agents listening on --port, over x/crypto/ssh (agent.go)
	SSH   Kind = "ssh"   // 'agent --stdio' started through the system ssh (sshexec.go)
	Slurm Kind = "slurm" // one 'agent --srun' per node, started by one srun step (slurm.go)
)

// kinds are the transports, in --transport's order: a new one is a file
// with its Dialer and one line here.
var kinds = []kindSpec{
	{Agent, newAgent, false},
	{SSH, newSSHExec, true},
	{Slurm, newSrunDialer, false},
}

// kindSpec is what the launcher needs to know of a transport.
type kindSpec struct {
	kind Kind
	// new builds the kind's Dialer for the hosts that run ranks (in plan
	// order); verbose (-v) makes the agents it starts log verbosely.
	new func(o Options, hosts []hostfile.Host, verbose bool, log *zap.Logger) (Dialer, error)
	// sshd: the kind reaches hosts through their stock sshd (port 22
	// unless given), which forks a process per connection.
	sshd bool
}

// spec is k's entry in kinds.
func spec(k Kind) (kindSpec, bool) {
	i := slices.IndexFunc(kinds, func(s kindSpec) bool { return s.kind == k })
	if i < 0 {
		return kindSpec{}, false
	}
	return kinds[i], true
}

// ParseKind parses --transport's value.
func ParseKind(s string) (Kind, error) {
	var names []string
	for _, k := range kinds {
		if string(k.kind) == s {
			return k.kind, nil
		}
		names = append(names, string(k.kind))
	}
	return "", fmt.Errorf("use %s or %s", strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
}

// Options are the --transport flags: how the launcher reaches the hosts'
// agents.
type Options struct {
	Kind           Kind
	Port           int
	AgentPath      string
	SSHCommand     string
	Identity       string
	KnownHosts     string
	AcceptNewHosts bool
	StartTimeout   time.Duration
	// UnreachableGrace is how long hosts whose last attempt found nothing
	// listening (ErrUnreachable) are waited for once every other host is
	// ready, before the launch fails; 0 waits the whole StartTimeout.
	UnreachableGrace time.Duration
	// MPIOperator is set in an mpi-operator launcher pod whose hosts come
	// from the operator's hostfile (K_MPI_JOB_ROLE=launcher): host keys
	// not in known_hosts are then accepted, unrecorded and with a warning,
	// as the operator's images configure ssh (StrictHostKeyChecking no,
	// UserKnownHostsFile /dev/null). A mismatch is still refused.
	MPIOperator bool
	// PortGiven: Port was given (-p, or an mpi-operator pod's
	// ssh_config) and wins over a Port in the ssh configuration;
	// otherwise Port is only the default.
	PortGiven bool
	// SSHConfig is -F: the ssh client configuration the agent transport
	// reads instead of ~/.ssh/config and /etc/ssh/ssh_config (NoSSHConfig:
	// none); "" reads those two.
	SSHConfig string
	// TreeWidth is --tree-width: TreeAuto, 0 (flat) or the width of the
	// agent tree (tree.go).
	TreeWidth int
	// TreeWidthGiven: --tree-width was on the command line (not
	// GANGWAY_TREE_WIDTH), so a transport without relays is an error.
	TreeWidthGiven bool
	// PortFrom names the ssh configuration the agents' port came from (an
	// mpi-operator launcher pod's /etc/ssh/ssh_config) when no -p was
	// given; "" otherwise.
	PortFrom string
}

// New builds the Dialer of o's kind for hosts, the hosts that run ranks
// (the srun transport starts its agents on exactly those); verbose (-v)
// makes the agents a transport starts log verbosely too. A Dialer that
// is an io.Closer must be closed when the launch ends (the srun step
// ends with it).
func New(o Options, hosts []hostfile.Host, verbose bool, log *zap.Logger) (Dialer, error) {
	k, ok := spec(o.Kind)
	if !ok {
		return nil, fmt.Errorf("no transport %q", o.Kind)
	}
	return k.new(o, hosts, verbose, log)
}

// ProbePort is the port on h that the preflight dials when h's agent
// offers no probe port of its own: the port the transport reaches h on
// (h's own, else the agents' --port, or 22 for a kind that goes through
// sshd), and whether that is sshd's, where every connection costs the
// host a fork.
func (o Options) ProbePort(h hostfile.Host) (port int, sshd bool) {
	k, _ := spec(o.Kind)
	sshd = k.sshd
	switch {
	case h.Port != 0:
		return h.Port, sshd
	case sshd:
		return 22, true
	}
	return o.Port, false
}

// ErrPermanent marks dial errors that retrying cannot fix (authentication,
// host key, protocol version); errors.Is(err, ErrPermanent) tells them.
var ErrPermanent = errors.New("permanent")

// permanentError marks err permanent without changing its message.
type permanentError struct{ error }

func (p permanentError) Unwrap() error        { return p.error }
func (p permanentError) Is(target error) bool { return target == ErrPermanent }

// Permanent marks err as one retrying cannot fix.
func Permanent(err error) error { return permanentError{err} }

// ErrUnreachable marks dial errors that say nothing listens on the host
// (connection refused, no route, a name lookup that failed for now):
// retrying can fix them (an agent starting late), but a host that goes on
// failing so while every other host is ready is more likely dead or
// mistyped; errors.Is(err, ErrUnreachable) tells them.
var ErrUnreachable = errors.New("unreachable")

// unreachableError marks err unreachable without changing its message.
type unreachableError struct{ error }

func (u unreachableError) Unwrap() error        { return u.error }
func (u unreachableError) Is(target error) bool { return target == ErrUnreachable }

// Unreachable marks err as a host where nothing answers yet.
func Unreachable(err error) error { return unreachableError{err} }

// ErrNoAnswer marks dial errors that say a TCP connect timed out: nothing
// answered (the host down, or a firewall drops the port). Not
// ErrUnreachable: the launch waits --start-timeout for such a host, as
// for one that is only slow. The agent tree goes around a relay that
// fails so (Tree.SetGoAround).
var ErrNoAnswer = errors.New("no answer")

type noAnswerError struct{ error }

func (e noAnswerError) Unwrap() error        { return e.error }
func (e noAnswerError) Is(target error) bool { return target == ErrNoAnswer }
