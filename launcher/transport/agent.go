package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"unicode"

	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"
	sshagent "golang.org/x/crypto/ssh/agent"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
)

// The agent transport (--transport agent, the default): x/crypto/ssh to
// the agents listening on --port, authenticated both ways (the user's
// identity, known_hosts), with the gangway subsystem on one session
// channel.

// AgentDialer reaches agents with x/crypto/ssh and opens the gangway
// subsystem (Dial), or a plain SSH client for a command (Client, for
// --rsh). The ssh client configuration (sshconfig.go) names the address,
// port, user, identities and jump hosts of each host.
type AgentDialer struct {
	cfg     Options
	log     *zap.Logger
	sshCfg  *sshConfig
	home    string
	khPath  string // --known-hosts, else ~/.ssh/known_hosts
	khMu    sync.Mutex
	khFiles map[string]*khFile
	hkaMemo map[string][]string // host key algorithm orders by known key types (hostKeyAlgorithms); under khMu
	user    string
	// fixed are -i's signers: given, they are the only identity.
	fixed []ssh.Signer
	// agentSigners are SSH_AUTH_SOCK's keys; defaults the default
	// identity files' (~/.ssh/id_*).
	agentSigners, defaults []ssh.Signer
	keysMu                 sync.Mutex
	keys                   map[string][]ssh.Signer // IdentityFile's, by path; nil: unusable
	jumps                  jumpPool
	targetsMu              sync.Mutex
	targets                map[targetKey]hostConfig // target's answers
}

var _ Dialer = (*AgentDialer)(nil)

// newAgent is the agent kind's constructor.
func newAgent(o Options, _ []hostfile.Host, _ bool, log *zap.Logger) (Dialer, error) {
	d, err := NewAgentDialer(o, log.Named("ssh"))
	if err != nil {
		return nil, err
	}
	return d, nil
}

// NewAgentDialer reads the ssh client configuration, loads the
// identities (-i, else SSH_AUTH_SOCK and ~/.ssh/id_*, and IdentityFile
// per host) and names the known_hosts file; no identity for a host fails
// its dials, permanently, with a message that says how to give one. A
// configuration file that does not parse is an error.
func NewAgentDialer(cfg Options, log *zap.Logger) (*AgentDialer, error) {
	d := &AgentDialer{cfg: cfg, log: log, keys: map[string][]ssh.Signer{}}
	if u, err := user.Current(); err == nil {
		d.user = u.Username
	}
	home, _ := os.UserHomeDir()
	d.home = home
	sc, err := loadSSHConfig(cfg.SSHConfig, home, d.user)
	if err != nil {
		return nil, err
	}
	d.sshCfg = sc
	for _, w := range sc.Warnings {
		log.Warn(w)
	}
	d.khPath = cfg.KnownHosts
	if d.khPath == "" {
		d.khPath = filepath.Join(home, ".ssh", "known_hosts")
	}
	if cfg.MPIOperator && !cfg.AcceptNewHosts {
		log.Warn("mpi-operator launcher pod: host keys not in known_hosts are accepted without being recorded, as the operator's images configure ssh (StrictHostKeyChecking no, UserKnownHostsFile /dev/null); a changed key is still refused",
			zap.String("known_hosts", d.khPath))
	}
	if cfg.Identity != "" {
		s, err := loadKey(cfg.Identity)
		if err != nil {
			return nil, fmt.Errorf("identity -i %s: %w", cfg.Identity, err)
		}
		d.fixed = withCert(cfg.Identity, s, log)
		return d, nil
	}
	if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" {
		if c, err := net.Dial("unix", sock); err == nil {
			if ss, err := sshagent.NewClient(c).Signers(); err == nil {
				d.agentSigners = ss
			}
		}
	}
	for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
		p := filepath.Join(home, ".ssh", n)
		if s, err := loadKey(p); err == nil {
			d.defaults = append(d.defaults, withCert(p, s, log)...)
		} else if !errors.Is(err, os.ErrNotExist) {
			log.Warn("skipping identity", zap.String("file", p), zap.Error(err))
		}
	}
	return d, nil
}

// errNoIdentity is why a host without any identity cannot be reached.
var errNoIdentity = errors.New("no SSH identity: give -i FILE, run an ssh-agent, or create ~/.ssh/id_ed25519")

// signers are the keys offered to host hc, as ssh offers them: -i's
// alone; else IdentityFile's (with the agent's after them, unless
// IdentitiesOnly, which keeps only the agent's keys that IdentityFile
// names); else the agent's and the default files' (IdentitiesOnly: the
// default files' only).
func (d *AgentDialer) signers(hc hostConfig) ([]ssh.Signer, error) {
	if d.fixed != nil {
		return d.fixed, nil
	}
	var ss []ssh.Signer
	switch {
	case len(hc.IdentityFiles) > 0:
		for _, f := range hc.IdentityFiles {
			ss = append(ss, d.identityFile(f)...)
		}
		if !hc.IdentitiesOnly {
			ss = append(ss, d.agentSigners...)
		}
	case hc.IdentitiesOnly:
		ss = d.defaults
	default:
		ss = append(slices.Clip(d.agentSigners), d.defaults...)
	}
	if len(ss) == 0 {
		if len(hc.IdentityFiles) > 0 {
			return nil, fmt.Errorf("no usable SSH identity for %s: IdentityFile %s in the ssh config (see the warnings above), and no ssh-agent key", hc.Alias, strings.Join(hc.IdentityFiles, ", "))
		}
		return nil, errNoIdentity
	}
	return ss, nil
}

// identityFile is the key at path (with its certificate), loaded once: a
// file that cannot be used is skipped with a warning, as ssh does, and
// an encrypted one stands for the ssh-agent's key with its public key.
func (d *AgentDialer) identityFile(path string) []ssh.Signer {
	d.keysMu.Lock()
	defer d.keysMu.Unlock()
	if ss, ok := d.keys[path]; ok {
		return ss
	}
	s, err := loadKey(path)
	var ss []ssh.Signer
	var pm *ssh.PassphraseMissingError
	switch {
	case err == nil:
		ss = withCert(path, s, d.log)
	case errors.As(err, &pm) && pm.PublicKey != nil:
		want := string(pm.PublicKey.Marshal())
		for _, a := range d.agentSigners {
			if string(a.PublicKey().Marshal()) == want {
				ss = append(ss, a)
			}
		}
		if ss == nil {
			d.log.Warn("skipping an encrypted identity the ssh-agent does not hold", zap.String("file", path))
		}
	default:
		d.log.Warn("skipping identity", zap.String("file", path), zap.Error(err))
	}
	d.keys[path] = ss
	return ss
}

// maxKeyFile bounds a private key file's read: RSA-16384 in PEM is 13 KiB.
const maxKeyFile = 1 << 20

// loadKey reads a private key as OpenSSH's ssh does: a key file of
// this user's that group or others may access is refused (sshkey_perm_ok;
// root's own files included), naming the fix.
func loadKey(path string) (ssh.Signer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == os.Getuid() && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s: permissions %04o are too open: a private key must be readable by you alone (chmod 600 %s), as ssh requires", path, fi.Mode().Perm(), path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile))
	if err != nil {
		return nil, err
	}
	s, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// withCert returns the key s loaded from path, preceded by its user
// certificate when path-cert.pub holds one (as OpenSSH's ssh loads it):
// an agent that trusts the certificate's CA lets it in, and one that
// does not may still know the plain key.
func withCert(path string, s ssh.Signer, log *zap.Logger) []ssh.Signer {
	b, err := os.ReadFile(path + "-cert.pub")
	if err != nil {
		return []ssh.Signer{s}
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(b)
	cert, ok := pub.(*ssh.Certificate)
	if err != nil || !ok || cert.CertType != ssh.UserCert || string(cert.Key.Marshal()) != string(s.PublicKey().Marshal()) {
		log.Warn("skipping a certificate that is not a user certificate of its key", zap.String("file", path+"-cert.pub"), zap.Error(err))
		return []ssh.Signer{s}
	}
	cs, err := ssh.NewCertSigner(cert, s)
	if err != nil {
		log.Warn("skipping certificate", zap.String("file", path+"-cert.pub"), zap.Error(err))
		return []ssh.Signer{s}
	}
	return []ssh.Signer{cs, s}
}

func (d *AgentDialer) Dial(ctx context.Context, h hostfile.Host) (io.ReadWriteCloser, string, error) {
	conn, chans, reqs, ip, err := d.handshake(ctx, h)
	if err != nil {
		return nil, "", err
	}
	ka, port := defaultKeepalive(), 0
	if hc, err := d.target(h); err == nil {
		ka, port = keepaliveFor(hc), hc.Port
	}
	cc, err := openSubsystem(conn, chans, reqs, ka)
	if errors.Is(err, errNoSubsystem) {
		from := ""
		if hc, err := d.target(h); err == nil && h.Port == 0 && !d.cfg.PortGiven && hc.Port != d.cfg.Port {
			from = fmt.Sprintf("; port %d is the ssh config's Port for %s, -p overrides it", hc.Port, h.Name)
		}
		return nil, "", Permanent(fmt.Errorf("the SSH server on %s has no %q subsystem (is it a gangway agent? for a stock sshd use --transport ssh%s)", h.Name, wire.Subsystem, from))
	}
	if err != nil {
		return nil, "", err
	}
	if port == 0 {
		return cc, ip, nil
	}
	return &agentConn{chanConn: cc, port: port}, ip, nil
}

// agentConn is a session with an agent and the port the agent listens
// on, which the other hosts' preflight probes: the port the launcher
// reached it on (the host's own, -p, its ssh configuration's Port, or
// --port), or the ephemeral port an agent started by srun reported.
type agentConn struct {
	*chanConn
	port int
}

// AgentPort is the port the agent listens on.
func (c *agentConn) AgentPort() int { return c.port }

// Client opens an authenticated SSH connection to h's agent for a
// command: --rsh, mpirun's way to start its daemons through the agents.
// The address is the IP it reached.
func (d *AgentDialer) Client(ctx context.Context, h hostfile.Host) (*ssh.Client, string, error) {
	conn, chans, reqs, ip, err := d.handshake(ctx, h)
	if err != nil {
		return nil, "", err
	}
	return ssh.NewClient(conn, chans, reqs), ip, nil
}

// PeerName is h's HostName in the ssh configuration: an alias there
// (Host node1 / HostName 10.1.0.1) means nothing to the other hosts,
// which look their peers up to find the route to them.
func (d *AgentDialer) PeerName(h hostfile.Host) string {
	hc, err := d.target(h)
	if err != nil {
		return h.Name
	}
	return hc.HostName
}

// target is h's configuration: its own user and port, then -p, then the
// ssh configuration, then the launcher's defaults (--port, this user).
// It is resolved once per host and kept: a launch asks for it several
// times per host (its dial, its keepalives, its peers' name for it, its
// relay's certificate), and each lookup walks every Host block of the
// configuration.
func (d *AgentDialer) target(h hostfile.Host) (hostConfig, error) {
	key := targetKey{h.Name, h.User, h.Port}
	d.targetsMu.Lock()
	hc, ok := d.targets[key]
	d.targetsMu.Unlock()
	if ok {
		return hc, nil
	}
	flagPort := 0
	if d.cfg.PortGiven {
		flagPort = d.cfg.Port
	}
	hc, err := d.sshCfg.resolve(h.Name, hostDefaults{User: h.User, Port: h.Port, FlagPort: flagPort, DefUser: d.user, DefPort: d.cfg.Port})
	if err != nil {
		return hc, err
	}
	d.targetsMu.Lock()
	if d.targets == nil {
		d.targets = map[targetKey]hostConfig{}
	}
	d.targets[key] = hc
	d.targetsMu.Unlock()
	return hc, nil
}

// targetKey is what target's answer depends on besides the fixed
// configuration and flags.
type targetKey struct {
	name, user string
	port       int
}

// handshake opens an authenticated SSH connection to h's agent, through
// its jump hosts if the ssh configuration names any. The address is the
// IP it reached; through a jump host, the HostName.
func (d *AgentDialer) handshake(ctx context.Context, h hostfile.Host) (ssh.Conn, <-chan ssh.NewChannel, <-chan *ssh.Request, string, error) {
	fail := func(err error) (ssh.Conn, <-chan ssh.NewChannel, <-chan *ssh.Request, string, error) {
		return nil, nil, nil, "", err
	}
	hc, err := d.target(h)
	if err != nil {
		return fail(Permanent(err))
	}
	jumps, err := d.route(hc, 0)
	if err != nil {
		return fail(Permanent(err))
	}
	var dial func(context.Context) (net.Conn, error)
	if len(jumps) > 0 {
		dial = func(ctx context.Context) (net.Conn, error) { return d.jumps.dialThrough(ctx, d, jumps, hc.Addr()) }
	}
	cc, chans, reqs, remote, err := d.sshHandshake(ctx, hc, dial, "")
	if err != nil {
		return fail(err)
	}
	ip := hc.HostName
	if ta, ok := remote.(*net.TCPAddr); ok && len(jumps) == 0 {
		ip = ta.IP.String()
	}
	return cc, chans, reqs, ip, nil
}

// sshHandshake dials hc (through dial when not nil, else TCP) and runs
// the SSH client handshake with hc's user, identities and host key
// checking. role names the server in errors ("jump host"; "" for an
// agent).
func (d *AgentDialer) sshHandshake(ctx context.Context, hc hostConfig, dial func(context.Context) (net.Conn, error), role string) (ssh.Conn, <-chan ssh.NewChannel, <-chan *ssh.Request, net.Addr, error) {
	signers, err := d.signers(hc)
	if err != nil {
		return nil, nil, nil, nil, Permanent(err)
	}
	khPath := d.knownHostsPath(hc)
	addr := hc.Addr()
	var banner strings.Builder // why a server refused the login, if it says
	cc, chans, reqs, remote, err := connect(ctx, addr, hc.ConnectTimeout, dial, func(c net.Conn) *ssh.ClientConfig {
		return &ssh.ClientConfig{
			User:              hc.User,
			Auth:              []ssh.AuthMethod{ssh.PublicKeys(signers...)},
			HostKeyCallback:   d.hostKeyCheck(hc),
			HostKeyAlgorithms: d.hostKeyAlgorithms(khPath, addr, c.RemoteAddr()),
			BannerCallback: func(msg string) error {
				if banner.Len() < 4096 {
					banner.WriteString(msg)
				}
				return nil
			},
		}
	})
	if err == nil {
		return cc, chans, reqs, remote, nil
	}
	var nsh *noSuchHostError
	if d.cfg.MPIOperator && errors.As(err, &nsh) {
		// A worker pod's DNS record appears once the pod is up:
		// retried until --start-timeout, not failed at once.
		return nil, nil, nil, nil, Unreachable(fmt.Errorf("%w (mpi-operator: worker pod not up yet?)", nsh))
	}
	if !strings.Contains(err.Error(), "unable to authenticate") {
		return nil, nil, nil, nil, err
	}
	u := hc.User
	if b := bannerText(banner.String()); b != "" {
		return nil, nil, nil, nil, Permanent(fmt.Errorf("authentication refused for user %s: %s", u, b))
	}
	if role != "" {
		return nil, nil, nil, nil, Permanent(fmt.Errorf("authentication refused for user %s (is the public key in ~%s/.ssh/authorized_keys on the %s? User and IdentityFile in the ssh config)", u, u, role))
	}
	return nil, nil, nil, nil, Permanent(fmt.Errorf("authentication refused for user %s (is the public key in ~%s/.ssh/authorized_keys on the host, or in the agent's --authorized-keys?)", u, u))
}

// knownHostsPath is the known_hosts file for hc: --known-hosts, else
// the ssh config's UserKnownHostsFile, else ~/.ssh/known_hosts.
func (d *AgentDialer) knownHostsPath(hc hostConfig) string {
	if d.cfg.KnownHosts == "" && hc.UserKnownHostsFile != "" {
		return hc.UserKnownHostsFile
	}
	return d.khPath
}

// hostKeyCheck is how hc's host key is checked: against its known_hosts
// file, a new key recorded where --accept-new-hosts or the ssh config's
// StrictHostKeyChecking allows it.
func (d *AgentDialer) hostKeyCheck(hc hostConfig) ssh.HostKeyCallback {
	acceptNew := d.cfg.AcceptNewHosts
	switch hc.StrictHostKeyChecking {
	case "no", "off", "accept-new":
		acceptNew = true
	}
	return d.hostKeyCallbackFor(d.knownHostsPath(hc), acceptNew)
}

// bannerText makes an agent's authentication banner safe to print: one
// paragraph of printable text, at most 512 bytes.
func bannerText(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return ' '
		case !unicode.IsPrint(r):
			return -1
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if len(s) > 512 {
		s = strings.ToValidUTF8(s[:512], "") + "..."
	}
	return s
}
