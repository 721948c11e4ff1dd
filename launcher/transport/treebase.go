package transport

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/hostfile"
)

// treeBase is what a tree needs of the transport beneath it: the
// launcher's own way to reach a host (Dial, for the first level and for
// hosts reached directly), and what a relay needs to log in to a child's
// agent as the launcher would: where it listens, as whom, which host key
// to expect, and the keys that agent already trusts, which sign the
// relay's job certificate. The agent transport answers from the ssh
// configuration, known_hosts and the user's keys; the srun transport from
// the agents' readiness lines and the step's one-time key.
type treeBase interface {
	Dialer
	PeerName(h hostfile.Host) string
	// child says how a relay reaches h's agent; it may wait (ctx) for
	// what the transport learns of h first.
	child(ctx context.Context, h hostfile.Host) (childTarget, error)
	// checkChild checks the host key a relay saw on c's agent at ip.
	checkChild(c childTarget, ip string, key ssh.PublicKey) error
	// certSigners are the keys h's agent trusts to sign a relay's
	// certificate for h's user.
	certSigners(h hostfile.Host) ([]ssh.Signer, error)
}

// childTarget is how a relay reaches one child's agent.
type childTarget struct {
	Addr string // host:port the relay dials
	User string
	Port int
	// Jumped: the launcher reaches the host through jump hosts
	// (ProxyJump); a relay, a node of the cluster, dials it directly,
	// and the launcher goes through the jumps itself if that fails.
	Jumped bool
	// HostKeyAlgorithms the relay asks for (nil: its defaults).
	HostKeyAlgorithms []string
	// AgentPort is the agent's own port when the transport knows it
	// (the agent transport: the port it dials, from the ssh
	// configuration too; srun: an ephemeral port), else 0.
	AgentPort int
	// Keepalive is the relay's keepalive timing for the child, as the
	// launcher's would be (the host's ServerAliveInterval and
	// ServerAliveCountMax).
	Keepalive keepalive

	hc  hostConfig    // the agent transport's
	key ssh.PublicKey // the srun transport's: the host key of the readiness line
}

// handshake bounds the relay's login to the child as the launcher's own
// would be bounded (the host's ConnectTimeout where it is longer).
func (c childTarget) handshake() time.Duration { return handshakeBound(c.hc.ConnectTimeout) }

var (
	_ treeBase = (*AgentDialer)(nil)
	_ treeBase = (*srunDialer)(nil)
)

func (d *AgentDialer) child(_ context.Context, h hostfile.Host) (childTarget, error) {
	hc, err := d.target(h)
	if err != nil {
		return childTarget{}, Permanent(err)
	}
	c := childTarget{Addr: hc.Addr(), User: hc.User, Port: hc.Port, AgentPort: hc.Port, Jumped: len(hc.Jumps) > 0, Keepalive: keepaliveFor(hc), hc: hc}
	if ra := literalAddr(hc); ra != nil {
		c.HostKeyAlgorithms = d.hostKeyAlgorithms(d.knownHostsPath(hc), hc.Addr(), ra)
	}
	return c, nil
}

func (d *AgentDialer) checkChild(c childTarget, ip string, key ssh.PublicKey) error {
	a, _ := netip.ParseAddr(ip)
	return d.hostKeyCheck(c.hc)(c.Addr, net.TCPAddrFromAddrPort(netip.AddrPortFrom(a, uint16(c.Port))), key)
}

func (d *AgentDialer) certSigners(h hostfile.Host) ([]ssh.Signer, error) {
	hc, err := d.target(h)
	if err != nil {
		return nil, nil // the child's own dial says why
	}
	return d.signers(hc)
}

// literalAddr is hc's address when its HostName is an IP literal (the
// known_hosts lines of an address then match), else nil.
func literalAddr(hc hostConfig) net.Addr {
	ip, err := netip.ParseAddr(hc.HostName)
	if err != nil {
		return nil
	}
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(ip, uint16(hc.Port)))
}

// PeerName is the node's name: the agents are told their peers'
// addresses (PeerAddrs).
func (d *srunDialer) PeerName(h hostfile.Host) string { return h.Name }

// child waits for h's readiness line: its agent's address, port and host
// key. A relay logs in as the launcher's user with a certificate the
// step's one-time key signed.
func (d *srunDialer) child(ctx context.Context, h hostfile.Host) (childTarget, error) {
	if !slices.Contains(d.nodes, h.Name) {
		return childTarget{}, Permanent(fmt.Errorf("not a node of the agents' srun step (%s)", strings.Join(d.nodes, ",")))
	}
	if err := d.start(); err != nil {
		return childTarget{}, Permanent(err)
	}
	r, err := d.await(ctx, h.Name)
	if err != nil {
		return childTarget{}, err
	}
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(r.HostKey))
	if err != nil {
		return childTarget{}, Permanent(fmt.Errorf("host key in the readiness line of %s: %w", r.Node, err))
	}
	_, ps, err := net.SplitHostPort(r.Addr)
	if err != nil {
		return childTarget{}, Permanent(fmt.Errorf("the readiness line of %s: address %q: %w", r.Node, r.Addr, err))
	}
	port, _ := strconv.Atoi(ps)
	return childTarget{Addr: r.Addr, User: d.user, Port: port, AgentPort: port, HostKeyAlgorithms: []string{key.Type()}, Keepalive: defaultKeepalive(), key: key}, nil
}

func (d *srunDialer) checkChild(c childTarget, _ string, key ssh.PublicKey) error {
	if string(key.Marshal()) != string(c.key.Marshal()) {
		return Permanent(fmt.Errorf("the agent at %s offered another host key than its readiness line gave (%s)", c.Addr, ssh.FingerprintSHA256(c.key)))
	}
	return nil
}

func (d *srunDialer) certSigners(hostfile.Host) ([]ssh.Signer, error) {
	return []ssh.Signer{d.signer}, nil
}
