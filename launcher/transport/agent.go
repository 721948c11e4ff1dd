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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unicode"

	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"
	sshagent "golang.org/x/crypto/ssh/agent"

	"gangway/agent/wire"
	"gangway/hostfile"
)

// The agent transport (--transport agent, the default): x/crypto/ssh to
// the agents listening on --port, authenticated both ways (the user's
// identity, known_hosts), with the gangway subsystem on one session
// channel.

// AgentDialer reaches agents with x/crypto/ssh and opens the gangway
// subsystem (Dial), or a plain SSH client for a command (Client, for
// --rsh).
type AgentDialer struct {
	cfg     Options
	log     *zap.Logger
	signers []ssh.Signer
	khPath  string
	khMu    sync.Mutex
	kh      ssh.HostKeyCallback // parsed known_hosts, nil until first use
	khErr   error
	caLines map[int]bool // known_hosts' @cert-authority lines
	user    string
	authErr error
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

// NewAgentDialer loads the identities (-i, else SSH_AUTH_SOCK and
// ~/.ssh/id_*) and names the known_hosts file; no identity at all fails
// every dial, permanently, with a message that says how to give one.
func NewAgentDialer(cfg Options, log *zap.Logger) (*AgentDialer, error) {
	d := &AgentDialer{cfg: cfg, log: log}
	if u, err := user.Current(); err == nil {
		d.user = u.Username
	}
	home, _ := os.UserHomeDir()
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
		d.signers = append(d.signers, withCert(cfg.Identity, s, log)...)
		return d, nil
	}
	if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" {
		if c, err := net.Dial("unix", sock); err == nil {
			if ss, err := sshagent.NewClient(c).Signers(); err == nil {
				d.signers = append(d.signers, ss...)
			}
		}
	}
	for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
		p := filepath.Join(home, ".ssh", n)
		if s, err := loadKey(p); err == nil {
			d.signers = append(d.signers, withCert(p, s, log)...)
		} else if !errors.Is(err, os.ErrNotExist) {
			log.Warn("skipping identity", zap.String("file", p), zap.Error(err))
		}
	}
	if len(d.signers) == 0 {
		d.authErr = errors.New("no SSH identity: give -i FILE, run an ssh-agent, or create ~/.ssh/id_ed25519")
	}
	return d, nil
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
	cc, err := openSubsystem(conn, chans, reqs)
	if errors.Is(err, errNoSubsystem) {
		return nil, "", Permanent(fmt.Errorf("the SSH server on %s has no %q subsystem (is it a gangway agent? for a stock sshd use --transport ssh)", h.Name, wire.Subsystem))
	}
	if err != nil {
		return nil, "", err
	}
	return cc, ip, nil
}

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

// handshake opens an authenticated SSH connection to h's agent.
func (d *AgentDialer) handshake(ctx context.Context, h hostfile.Host) (ssh.Conn, <-chan ssh.NewChannel, <-chan *ssh.Request, string, error) {
	fail := func(err error) (ssh.Conn, <-chan ssh.NewChannel, <-chan *ssh.Request, string, error) {
		return nil, nil, nil, "", err
	}
	if d.authErr != nil {
		return fail(Permanent(d.authErr))
	}
	port := h.Port
	if port == 0 {
		port = d.cfg.Port
	}
	addr := net.JoinHostPort(h.Name, strconv.Itoa(port))
	u := h.User
	if u == "" {
		u = d.user
	}
	var banner strings.Builder // why an agent refused the login, if it says
	cc, chans, reqs, remote, err := connect(ctx, addr, func(c net.Conn) *ssh.ClientConfig {
		return &ssh.ClientConfig{
			User:              u,
			Auth:              []ssh.AuthMethod{ssh.PublicKeys(d.signers...)},
			HostKeyCallback:   d.hostKeyCallback(),
			HostKeyAlgorithms: d.hostKeyAlgorithms(addr, c.RemoteAddr()),
			BannerCallback: func(msg string) error {
				if banner.Len() < 4096 {
					banner.WriteString(msg)
				}
				return nil
			},
		}
	})
	if err != nil {
		if strings.Contains(err.Error(), "unable to authenticate") {
			if b := bannerText(banner.String()); b != "" {
				return fail(Permanent(fmt.Errorf("authentication refused for user %s: %s", u, b)))
			}
			return fail(Permanent(fmt.Errorf("authentication refused for user %s (is the public key in ~%s/.ssh/authorized_keys on the host, or in the agent's --authorized-keys?)", u, u)))
		}
		var nsh *noSuchHostError
		if d.cfg.MPIOperator && errors.As(err, &nsh) {
			// A worker pod's DNS record appears once the pod is up:
			// retried until --start-timeout, not failed at once.
			return fail(Unreachable(fmt.Errorf("%w (mpi-operator: worker pod not up yet?)", nsh)))
		}
		return fail(err)
	}
	ip := ""
	if ta, ok := remote.(*net.TCPAddr); ok {
		ip = ta.IP.String()
	}
	return cc, chans, reqs, ip, nil
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
