package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
)

// The bench's own names and addresses; nothing else is touched.
var (
	bedPrefix = "gwb0" // namespaces gwb0h0.., links gwb0br, gwb0v0.. (-bed N: gwbN)
	bedSubnet = 190    // hosts 198.18.190.1..; the bridge 198.18.190.254 (-bed N: 190+N)
)

const (
	sshdPort   = 22122 // OpenSSH sshd in every host: the peers and --transport ssh
	agentPort  = 22123 // gangway agents in every host (steady state)
	loopPort   = 22190 // loopback agents on 127.0.190-229.x (scale, treepath)
	loopSubnet = 190
)

// bins are the programs the bench runs.
type bins struct {
	launcher, agent string // bin/launcher, bin/agent (absolute)
	self            string // this program, which doubles as the output generator
}

// netEnv is the namespace test bed with an OpenSSH sshd and a gangway
// agent in every host.
type netEnv struct {
	bed     *testbed.Bed
	hosts   []testbed.Host
	keys    sshtest.Keys
	dir     string
	kh      string          // known_hosts trusting every agent
	sshArgs []string        // OpenSSH client options (sshtest.SSHArgs: curve25519, key, port)
	sshWrap string          // script running ssh with sshArgs, for mpirun and Hydra
	fanout  string          // bash ssh fan-out script
	agents  []*testbed.Proc // setsid -w, the agent's parent
	agentPd []int           // the agents' own PIDs
	bins    bins
}

// jobHosts is how many of the bed's hosts the scenarios' jobs run on:
// 16; a 17th, when the bed has one, is the recover scenario's spare.
func (e *netEnv) jobHosts() int { return min(len(e.hosts), 16) }

// setupNet builds the bed with n hosts, starts sshd and an agent in each,
// and waits until all answer. On error the caller still calls close.
func setupNet(ctx context.Context, n int, b bins, dir string, logf func(string, ...any)) (*netEnv, error) {
	if err := testbed.Usable(); err != nil {
		return nil, fmt.Errorf("cannot build network-namespace hosts: %w", err)
	}
	bed, err := testbed.New(ctx, testbed.Options{Prefix: bedPrefix, Hosts: n, Subnet: bedSubnet, Logf: logf})
	if err != nil {
		return nil, err
	}
	e := &netEnv{bed: bed, hosts: bed.Hosts(), dir: dir, bins: b}
	if e.keys, err = sshtest.GenKeys(dir); err != nil {
		return e, err
	}
	e.sshArgs = sshtest.SSHArgs(e.keys, sshdPort)
	var addrs []string
	for _, h := range e.hosts {
		addrs = append(addrs, h.Addr)
	}
	if e.kh, err = e.keys.WriteKnownHosts(addrs, agentPort); err != nil {
		return e, err
	}
	if err := e.writeScripts(); err != nil {
		return e, err
	}
	for i := range e.hosts {
		if err := e.startSSHD(ctx, i); err != nil {
			return e, err
		}
		if err := e.startAgent(ctx, i); err != nil {
			return e, err
		}
	}
	for i := range e.hosts {
		if err := e.waitAgent(ctx, i); err != nil {
			return e, err
		}
	}
	return e, nil
}

// startAgent starts host i's agent (e.agents[i], appended or replaced).
func (e *netEnv) startAgent(ctx context.Context, i int) error {
	h := e.hosts[i]
	// In its own session, as a service runs: with the kernel's
	// autogroup scheduling a session shares CPU fairly with other
	// sessions, and sshd gives each login (so each peer's per-host
	// proxy) its own session too.
	p, err := e.bed.Start(ctx, i, "/usr/bin/unshare", "--uts", "/bin/sh", "-c", `hostname "$1" && shift && exec "$@"`, "sh", h.Addr,
		"/usr/bin/setsid", "-w", e.bins.agent,
		"--listen", net.JoinHostPort(h.Addr, strconv.Itoa(agentPort)),
		"--host-key", e.keys.HostKey, "--authorized-keys", e.keys.AuthorizedKeys,
		"--name", "h"+strconv.Itoa(i), "--log-format", "json")
	if err != nil {
		return err
	}
	if i < len(e.agents) {
		e.agents[i] = p
	} else {
		e.agents = append(e.agents, p)
	}
	return nil
}

// waitAgent waits until host i's agent answers and records its PID
// (e.agentPd[i], appended or replaced).
func (e *netEnv) waitAgent(ctx context.Context, i int) error {
	h := e.hosts[i]
	if err := waitBanner(ctx, net.JoinHostPort(h.Addr, strconv.Itoa(agentPort)), 20*time.Second); err != nil {
		return fmt.Errorf("agent on host %d: %w\n%s", i, err, e.agents[i].Output())
	}
	kids := children(e.agents[i].Pid, "agent")
	if len(kids) != 1 {
		return fmt.Errorf("agent on host %d: %d agent processes under setsid (pid %d)", i, len(kids), e.agents[i].Pid)
	}
	if i < len(e.agentPd) {
		e.agentPd[i] = kids[0]
	} else {
		e.agentPd = append(e.agentPd, kids[0])
	}
	return nil
}

// startSSHD starts OpenSSH's sshd in host i as testbed.StartSSHD does
// (same configuration, clean shell: an empty file bind-mounted over
// ~/.bashrc in the private mount namespace of ip netns exec), and also in
// its own UTS namespace whose hostname is the host's address. Every
// namespace host otherwise reports this machine's hostname, and Open MPI's
// daemons then share one session directory /tmp/ompi.<hostname>.0 across
// hosts: they race on it and mpirun fails or hangs. Agents get the same
// hostname (setupNet), so every launcher's ranks see the same names.
func (e *netEnv) startSSHD(ctx context.Context, i int) error {
	h := e.hosts[i]
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		return fmt.Errorf("openssh-server not installed: %w", err)
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return err
	}
	conf := filepath.Join(e.dir, "sshd_"+h.NS+".conf")
	text, err := testbed.SSHDConfig(h, sshdPort, e.keys)
	if err != nil {
		return err
	}
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return err
	}
	empty := filepath.Join(e.dir, "empty_bashrc")
	if err := os.WriteFile(empty, nil, 0o444); err != nil {
		return err
	}
	home, _ := os.UserHomeDir()
	const script = `hostname "$1" || exit 126
if [ -f "$3" ]; then mount --bind -- "$2" "$3" || exit 126; fi
shift 3; exec "$@"`
	p, err := e.bed.Start(ctx, i, "/usr/bin/unshare", "--uts", "/bin/sh", "-c", script, "sh", h.Addr, empty, filepath.Join(home, ".bashrc"),
		"/usr/sbin/sshd", "-D", "-e", "-f", conf)
	if err != nil {
		return err
	}
	addr := net.JoinHostPort(h.Addr, strconv.Itoa(sshdPort))
	if err := waitBanner(ctx, addr, 10*time.Second); err != nil {
		return fmt.Errorf("sshd on host %d: %w\n%s", i, err, p.Output())
	}
	return nil
}

func (e *netEnv) close() error {
	if e == nil || e.bed == nil {
		return nil
	}
	return e.bed.Close()
}

// writeScripts writes the ssh wrapper (the rsh agent of mpirun and Hydra)
// and the bash fan-out.
func (e *netEnv) writeScripts() error {
	e.sshWrap = filepath.Join(e.dir, "ssh-wrap")
	wrap := "#!/bin/sh\nexec /usr/bin/ssh " + shellJoin(e.sshArgs) + " \"$@\"\n"
	if err := os.WriteFile(e.sshWrap, []byte(wrap), 0o755); err != nil {
		return err
	}
	e.fanout = filepath.Join(e.dir, "ssh-fanout")
	fan := `#!/bin/bash
# ssh-fanout CMD HOST...: run CMD on every HOST at once, fail if any fails.
cmd=$1; shift
pids=()
for h in "$@"; do /usr/bin/ssh ` + shellJoin(e.sshArgs) + ` "root@$h" "$cmd" & pids+=($!); done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
`
	return os.WriteFile(e.fanout, []byte(fan), 0o755)
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=/.,:") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// waitBanner dials addr until it answers with an SSH identification string.
func waitBanner(ctx context.Context, addr string, timeout time.Duration) error {
	return testbed.WaitSSH(ctx, addr, nil, timeout)
}

// addrs returns the data addresses of the first n hosts.
func (e *netEnv) addrs(n int) []string {
	var out []string
	for _, h := range e.hosts[:n] {
		out = append(out, h.Addr)
	}
	return out
}

// hostList is "-H a:k,b:k" for the first n hosts, with port when not 0.
func (e *netEnv) hostList(n, k, port int) string {
	var parts []string
	for _, a := range e.addrs(n) {
		p := a + ":" + strconv.Itoa(k)
		if port != 0 {
			p += ":" + strconv.Itoa(port)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ",")
}

// hostfile writes an Open MPI ("addr slots=k") or Hydra ("addr:k")
// hostfile for the first n hosts and returns its path.
func (e *netEnv) hostfile(style string, n, k int) (string, error) {
	path := filepath.Join(e.dir, fmt.Sprintf("hosts-%s-%dx%d", style, n, k))
	var s strings.Builder
	for _, a := range e.addrs(n) {
		if style == "ompi" {
			fmt.Fprintf(&s, "%s slots=%d\n", a, k)
		} else {
			fmt.Fprintf(&s, "%s:%d\n", a, k)
		}
	}
	return path, os.WriteFile(path, []byte(s.String()), 0o644)
}

// pdshHosts is pdsh's -w list for the first n hosts.
func pdshHosts(n int) string {
	if n == 1 {
		return fmt.Sprintf("198.18.%d.1", bedSubnet)
	}
	return fmt.Sprintf("198.18.%d.[1-%d]", bedSubnet, n)
}
