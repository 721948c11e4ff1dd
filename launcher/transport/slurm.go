package transport

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
)

// The srun transport (--transport slurm, the default inside a Slurm
// allocation when no -H or hostfile is given) starts one `agent --srun` per
// node with one srun step, as Open MPI's mpirun and Hydra start their
// daemons, and then runs the job through those agents exactly as through
// agents reached over SSH. Slurm tracks the agents and every rank they
// start as processes of the step, so ending the step (this launcher's
// srun ending, scancel, the job's time limit) ends them all.
//
// No standing keys and no trust on first use: the launcher makes a
// one-time ed25519 key pair in memory and passes the public half to the
// agents in the step's environment (wire.SrunKeyEnv); each agent makes an
// in-memory host key, listens on an ephemeral port and prints a
// wire.SrunReady line with its address and host key on its stdout, which
// srun carries back (Slurm authenticates the step's I/O with munge). The
// launcher dials that address and accepts exactly that host key
// (ssh.FixedHostKey). Nothing is read from or written to ~/.ssh.

// srunOptions are the step's options, chosen against srun(1) of Slurm
// 22.05 (Debian 12) and later:
//
//   - --nodes=N --ntasks=N --ntasks-per-node=1 --nodelist=...: one agent
//     on each node that runs ranks (and no more).
//   - --overlap: the step shares every resource (CPUs, memory, GRES) with
//     every other step, so it neither waits for steps that hold the
//     allocation's CPUs nor keeps later steps from starting.
//   - not --exact: without it the step is given all the CPUs the job holds
//     on each node. The ranks run inside the agent's step, so with
//     --exact (one CPU for the one task) a cgroup-confined cluster
//     (task/cgroup) would squeeze every rank of a node onto one CPU.
//   - --cpu-bind=none: Slurm does not pin the agent, whose CPU mask every
//     rank would inherit; -bind-to places ranks.
//   - --mem=0: for a step, access to all the job's memory on the node
//     without taking any of it from other steps (no memory claim).
//   - no GPU option: a step gets every GRES the job holds by default, so
//     the ranks see the job's GPUs (and Slurm's CUDA_VISIBLE_DEVICES).
//   - --kill-on-bad-exit=1: an agent that fails ends the whole step.
//   - --mpi=none: no Slurm PMI server for the agents (they serve PMI to
//     the ranks themselves; a site's MpiDefault=pmix would otherwise put
//     PMIX_* variables into every rank).
//   - --input=none: srun leaves the launcher's stdin alone (it goes to
//     rank 0 through the protocol).
//   - --export=ALL: the step gets the launcher's environment (with the
//     public key) even under sbatch --export=NONE.
//   - --job-name=gangway-agents: how the step shows in squeue -s.
var srunOptions = []string{"--overlap", "--cpu-bind=none", "--mem=0", "--kill-on-bad-exit=1", "--mpi=none", "--input=none", "--export=ALL", "--job-name=gangway-agents"}

// srunReshapingVars are input variables of srun, exported by sbatch or
// salloc for the job, that would give the agents' step another shape than
// srunOptions (a GPU per task, exclusive CPUs, labelled or redirected
// output...) and that the command line does not override. They are left
// out of srun's environment (and so of the ranks').
var srunReshapingVars = []string{
	"SLURM_GPUS_PER_TASK", "SLURM_NTASKS_PER_GPU", "SLURM_CPUS_PER_GPU", "SLURM_MEM_PER_GPU", "SLURM_MEM_PER_CPU",
	"SLURM_GPU_BIND", "SLURM_STEP_GRES", "SLURM_EXACT", "SLURM_EXCLUSIVE", "SLURM_DISTRIBUTION",
	"SLURM_STDOUTMODE", "SLURM_STDERRMODE", "SLURM_LABELIO", "SLURM_OPEN_MODE", "SLURM_UNBUFFEREDIO",
	"SLURM_NTASKS_PER_CORE", "SLURM_NTASKS_PER_SOCKET", "SLURM_HINT", "SRUN_CPUS_PER_TASK", "SLURM_THREADS_PER_CORE",
	"SLURM_MEM_BIND", "SLURM_IMMEDIATE", "SLURM_NO_KILL",
}

// srunExitWait is how long Close waits for the step to end by itself
// (every agent exits when its session ends; one whose session dropped
// stops its ranks first, agent.LostGrace) before it ends srun.
var srunExitWait = 5 * time.Second

// srunDialer is the srun transport's Dialer. The step starts at the first
// Dial; Close ends it.
type srunDialer struct {
	log    *zap.Logger
	job    string   // SLURM_JOB_ID, for messages
	nodes  []string // the step's nodes: the hosts that run ranks
	argv   []string
	env    []string
	user   string
	signer ssh.Signer

	once     sync.Once
	startErr error
	cmd      *exec.Cmd
	exited   chan struct{} // closed once srun has exited (or failed to start)
	exitErr  error         // cmd.Wait's, valid after exited
	stopped  bool          // Close signalled srun

	mu      sync.Mutex
	ready   map[string]wire.SrunReady
	problem string        // the last bad readiness line, for messages
	changed chan struct{} // closed and replaced at every readiness line
	slurm   []string      // srun's and slurmstepd's last messages
}

var (
	_ Dialer        = (*srunDialer)(nil)
	_ PeerAddresser = (*srunDialer)(nil)
)

// newSrunDialer is the slurm kind's constructor: the step's nodes are
// hosts, those that run ranks.
func newSrunDialer(o Options, hosts []hostfile.Host, verbose bool, log *zap.Logger) (Dialer, error) {
	d, err := newSrun(o, hosts, verbose, os.Environ(), log.Named("srun"))
	if err != nil {
		return nil, err
	}
	return d, nil
}

// newSrun prepares the step: its nodes (hosts, once each), the one-time
// key, srun's command line and environment (from environ, the
// launcher's).
func newSrun(o Options, hosts []hostfile.Host, verbose bool, environ []string, log *zap.Logger) (*srunDialer, error) {
	d := &srunDialer{log: log, exited: make(chan struct{}), ready: map[string]wire.SrunReady{}, changed: make(chan struct{})}
	for _, h := range hosts {
		if !slices.Contains(d.nodes, h.Name) {
			d.nodes = append(d.nodes, h.Name)
		}
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	if d.signer, err = ssh.NewSignerFromKey(priv); err != nil {
		return nil, err
	}
	if u, err := user.Current(); err == nil {
		d.user = u.Username
	}
	pub := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(d.signer.PublicKey())))
	d.env = srunEnv(environ, pub)
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "SLURM_JOB_ID="); ok {
			d.job = v
		}
	}
	d.argv = srunArgs(d.nodes, o.AgentPath, o.StartTimeout, verbose)
	return d, nil
}

// srunArgs is the srun command line that starts one agent on each node.
func srunArgs(nodes []string, agentPath string, wait time.Duration, verbose bool) []string {
	n := strconv.Itoa(len(nodes))
	args := []string{"srun", "--nodes=" + n, "--ntasks=" + n, "--ntasks-per-node=1", "--nodelist=" + strings.Join(nodes, ",")}
	args = append(args, srunOptions...)
	args = append(args, agentPath, "--srun", "--srun-wait="+max(wait, time.Second).String(), "--log-format=json")
	if verbose {
		args = append(args, "-v")
	}
	return args
}

// srunEnv is srun's environment: the launcher's, less srunReshapingVars,
// plus the launcher's one-time public key.
func srunEnv(environ []string, pub string) []string {
	out := make([]string, 0, len(environ)+1)
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if k != wire.SrunKeyEnv && !slices.Contains(srunReshapingVars, k) {
			out = append(out, kv)
		}
	}
	return append(out, wire.SrunKeyEnv+"="+pub)
}

// start runs srun once, from a goroutine locked to its OS thread: the
// parent-death signal fires when the thread that forked srun ends, so
// that thread lives until srun has exited. srun stays in the launcher's
// process group (a signal to the group reaches it too) and gets SIGTERM
// if the launcher dies, even by SIGKILL: srun then cancels the step and
// Slurm kills every agent and rank.
func (d *srunDialer) start() error {
	d.once.Do(func() {
		d.cmd = exec.Command(d.argv[0], d.argv[1:]...)
		d.cmd.Env = d.env
		d.cmd.Stdout = &lineWriter{line: d.stdoutLine}
		d.cmd.Stderr = &lineWriter{line: d.stderrLine}
		d.cmd.SysProcAttr = srunProcAttr()
		// A process that inherited srun's pipes cannot hold Wait for long.
		d.cmd.WaitDelay = 2 * time.Second
		d.log.Debug("starting the agents", zap.Strings("argv", d.argv))
		started := make(chan error, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with this goroutine, after srun
			if err := d.cmd.Start(); err != nil {
				d.exitErr = err
				close(d.exited)
				started <- err
				return
			}
			started <- nil
			d.exitErr = d.cmd.Wait()
			close(d.exited)
		}()
		if err := <-started; err != nil {
			d.startErr = fmt.Errorf("cannot start srun to start the agents: %w", err)
		}
	})
	return d.startErr
}

// Dial waits for the agent on h to report from the step, then logs in to
// it with the one-time key and accepts only the host key it reported.
func (d *srunDialer) Dial(ctx context.Context, h hostfile.Host) (io.ReadWriteCloser, string, error) {
	if !slices.Contains(d.nodes, h.Name) {
		return nil, "", Permanent(fmt.Errorf("not a node of the agents' srun step (%s)", strings.Join(d.nodes, ",")))
	}
	if err := d.start(); err != nil {
		return nil, "", Permanent(err)
	}
	r, err := d.await(ctx, h.Name)
	if err != nil {
		return nil, "", err
	}
	c, err := d.dialAgent(ctx, r)
	if err != nil {
		return nil, "", err
	}
	ip, _, _ := net.SplitHostPort(r.Addr)
	return c, ip, nil
}

// await returns node's readiness line once srun has passed it on.
func (d *srunDialer) await(ctx context.Context, node string) (wire.SrunReady, error) {
	for {
		d.mu.Lock()
		r, ok := d.ready[node]
		changed := d.changed
		d.mu.Unlock()
		if ok {
			return r, nil
		}
		select {
		case <-changed:
		case <-d.exited:
			// Every line srun wrote has been read by now (Wait copies
			// the output to the end first).
			d.mu.Lock()
			r, ok := d.ready[node]
			d.mu.Unlock()
			if ok {
				return r, nil
			}
			return r, Permanent(fmt.Errorf("srun ended (%v) before the agent on %s reported%s", exitText(d.exitErr), node, d.slurmSaid()))
		case <-ctx.Done():
			return r, d.notYet(node)
		}
	}
}

// PeerAddrs waits until the agent on every node of the step has reported
// and returns the IP each listens on, by node name: the addresses the
// launcher dials, which the agents then use for their peers' routes
// (the node names are Slurm's NodeName, which need not resolve).
func (d *srunDialer) PeerAddrs(ctx context.Context) (map[string]string, error) {
	out := make(map[string]string, len(d.nodes))
	for _, node := range d.nodes {
		r, err := d.await(ctx, node)
		if err != nil {
			return nil, err
		}
		ip, _, err := net.SplitHostPort(r.Addr)
		if err != nil {
			return nil, Permanent(fmt.Errorf("the readiness line of %s: address %q: %w", node, r.Addr, err))
		}
		out[node] = ip
	}
	return out, nil
}

// notYet says why node's agent has not reported: the step has not started
// (no agent reported; Slurm 22.05's srun waits silently for a step it
// cannot create yet, for example in a suspended allocation), or it has
// but this node's agent is missing.
func (d *srunDialer) notYet(node string) error {
	d.mu.Lock()
	n := len(d.ready)
	problem := d.problem
	d.mu.Unlock()
	var msg string
	if n == 0 {
		msg = "the srun step that starts the agents has not started"
		if d.job != "" {
			msg += fmt.Sprintf(" (srun is still waiting: is job %s suspended, or its nodes busy? see squeue -s -j %s)", d.job, d.job)
		}
	} else {
		msg = fmt.Sprintf("no agent on %s has reported from the srun step (%d of %d nodes did)", node, n, len(d.nodes))
	}
	if problem != "" {
		msg += "; " + problem
	}
	return errors.New(msg + d.slurmSaid())
}

// dialAgent logs in to the agent of r.
func (d *srunDialer) dialAgent(ctx context.Context, r wire.SrunReady) (*agentConn, error) {
	hostKey, _, _, _, err := ssh.ParseAuthorizedKey([]byte(r.HostKey))
	if err != nil {
		return nil, Permanent(fmt.Errorf("host key in the readiness line of %s: %w", r.Node, err))
	}
	fixed := ssh.FixedHostKey(hostKey)
	cc, chans, reqs, _, err := connect(ctx, r.Addr, 0, nil, func(net.Conn) *ssh.ClientConfig {
		return &ssh.ClientConfig{
			User: d.user,
			Auth: []ssh.AuthMethod{ssh.PublicKeys(d.signer)},
			HostKeyCallback: func(host string, remote net.Addr, key ssh.PublicKey) error {
				if fixed(host, remote, key) != nil {
					return Permanent(fmt.Errorf("%s at %s offered another host key than its readiness line gave (%s)", r.Node, r.Addr, ssh.FingerprintSHA256(hostKey)))
				}
				return nil
			},
		}
	})
	var pe permanentError
	if errors.As(err, &pe) {
		return nil, pe // the host key, said as is
	}
	if err != nil {
		return nil, err
	}
	conn, err := openSubsystem(cc, chans, reqs, defaultKeepalive())
	if errors.Is(err, errNoSubsystem) {
		return nil, Permanent(fmt.Errorf("the agent on %s refused the gangway session (it serves one)", r.Node))
	}
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(r.Addr)
	p, _ := strconv.Atoi(port)
	return &agentConn{chanConn: conn, port: p}, nil // the agent's ephemeral port
}

// Close ends srun: it waits srunExitWait for the step to end by itself
// (each agent exits when its session ends, and the launcher has closed
// them; not at all when no agent ever reported), then sends srun SIGTERM,
// which makes srun cancel the step (Slurm kills every process of it), and
// SIGKILL if srun is still there 10 s later.
func (d *srunDialer) Close() error {
	if d.cmd == nil || d.startErr != nil {
		return nil
	}
	d.mu.Lock()
	wait := srunExitWait
	if len(d.ready) == 0 {
		wait = 0
	}
	d.mu.Unlock()
	select {
	case <-d.exited:
	case <-time.After(wait):
		d.log.Info("ending the agents' srun step")
		d.stopped = true
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(10 * time.Second):
			d.log.Warn("srun ignored SIGTERM for 10s; killing it")
			_ = d.cmd.Process.Kill()
			<-d.exited
		}
	}
	if d.exitErr != nil && !d.stopped {
		d.log.Info("the agents' srun step failed", zap.String("srun", exitText(d.exitErr)), zap.String("slurm", strings.Join(d.slurmLines(), " | ")))
	}
	return nil
}

// stdoutLine handles a line of the step's stdout: readiness lines.
func (d *srunDialer) stdoutLine(l string) {
	if !wire.IsSrunReady(l) {
		d.log.Debug("step stdout", zap.String("line", l))
		return
	}
	r, err := wire.ParseSrunReady(l)
	d.mu.Lock()
	defer d.mu.Unlock()
	switch _, dup := d.ready[r.Node]; {
	case err != nil:
		d.problem = err.Error()
	case !slices.Contains(d.nodes, r.Node):
		d.problem = fmt.Sprintf("a readiness line from %s, which is not a node of the step", r.Node)
	case dup:
		d.problem = fmt.Sprintf("a second readiness line from %s", r.Node)
	default:
		d.ready[r.Node] = r
		close(d.changed)
		d.changed = make(chan struct{})
		return
	}
	d.log.Warn("ignoring a line from the srun step", zap.String("why", d.problem))
}

// stderrLine handles a line of the step's stderr: srun's and slurmstepd's
// messages (kept for errors; errors shown at once), and the agents' JSON
// logs (debug).
func (d *srunDialer) stderrLine(l string) {
	if strings.HasPrefix(l, "{") {
		d.log.Debug("agent", zap.String("log", l))
		return
	}
	d.mu.Lock()
	d.slurm = append(d.slurm, l)
	if len(d.slurm) > 8 {
		d.slurm = d.slurm[1:]
	}
	d.mu.Unlock()
	if strings.Contains(l, "error") {
		d.log.Warn(l)
	} else {
		d.log.Info(l)
	}
}

func (d *srunDialer) slurmLines() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.slurm)
}

// slurmSaid is srun's last messages, for errors: ": srun said: ...", or "".
func (d *srunDialer) slurmSaid() string {
	l := d.slurmLines()
	if len(l) == 0 {
		return ""
	}
	return "; srun said: " + strings.Join(l[max(0, len(l)-3):], " | ")
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// lineWriter calls line for every whole line written to it (a longer
// than 64 KiB one in pieces).
type lineWriter struct {
	buf  []byte
	line func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.line(strings.TrimSuffix(string(w.buf[:i]), "\r"))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 {
		w.line(string(w.buf))
		w.buf = nil
	}
	return len(p), nil
}
