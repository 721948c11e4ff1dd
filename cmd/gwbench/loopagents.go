package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent"
	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/agent/facts"
	"github.com/gangway-hpc/gangway/agent/sshd"
	"github.com/gangway-hpc/gangway/cmd/internal/scalebed"
)

// loopAgents are agents on loopback addresses 127.0.<190+i/250>.<i%250+1>,
// all on loopPort, run by worker processes (gwbench -loop-agents), at
// most agentsPerWorker each: an agent holds a descriptor for its
// listener, its launcher's (or relay's) connection, each relay's
// connections to its children and three or four per running rank (PMI
// socket, output pipes), and one process stops at its RLIMIT_NOFILE
// (20000 here, which root cannot raise in this container). The ranks
// are the workers' children.
type loopAgents struct {
	addrs   []string
	keys    sshtest.Keys
	kh      string
	workers []*loopWorker
	per     int    // agents per worker
	hidden  string // the directory of this machine's GPUs the workers cover, if any
}

// gpuNote says what the agents know of GPUs, for the configuration line.
func (la *loopAgents) gpuNote() string {
	if la.hidden == "" {
		return "no nvidia-smi for them (GPU health not checked)"
	}
	return "no nvidia-smi for them (GPU health not checked) and this machine's GPUs hidden from them (" + la.hidden + " under an empty tmpfs in the workers' own mount namespace)"
}

// agentsPerWorker keeps a worker's descriptors under 10,000 with every
// agent a relay and running a rank; agents running k ranks each get
// agentsPerWorker/k to a worker (at 8 ranks, 1250 agents' ranks alone
// held 40,000 descriptors and failed to start: "too many open files").
const agentsPerWorker = 1250

type loopWorker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	first int
	n     int
}

func loopAddr(i int) string { return fmt.Sprintf("127.0.%d.%d", loopSubnet+i/250, i%250+1) }

// maxLoopAgents is what loopAddr can name within 127.0.190-239.x.
const maxLoopAgents = 50 * 250

// startLoopAgents starts n agents in worker processes and waits until
// each listens. stop ends them, with every session and rank.
func startLoopAgents(ctx context.Context, n, ranks int, dir string) (*loopAgents, error) {
	if n > maxLoopAgents {
		return nil, fmt.Errorf("%d loopback agents: at most %d", n, maxLoopAgents)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	keys, err := sshtest.GenKeys(dir)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable (the agents' worker): %w", err)
	}
	la := &loopAgents{keys: keys, per: max(1, agentsPerWorker/max(1, ranks))}
	for i := range n {
		la.addrs = append(la.addrs, loopAddr(i))
	}
	if la.kh, err = keys.WriteKnownHosts(la.addrs, loopPort); err != nil {
		return nil, err
	}
	hide := gpusToHide()
	la.hidden = hide
	lim := loopStartupLimits(n)
	for first := 0; first < n; first += la.per {
		w, err := startLoopWorker(ctx, self, dir, first, min(la.per, n-first), hide, lim)
		if err != nil {
			la.stop()
			return nil, err
		}
		la.workers = append(la.workers, w)
	}
	return la, nil
}

// gpuProcDir is where the NVIDIA driver lists this machine's GPUs, which
// an agent's facts read when nvidia-smi is missing (a variable for tests).
var gpuProcDir = "/proc/driver/nvidia/gpus"

// gpusToHide is gpuProcDir where the workers can hide it (it exists and
// gwbench runs as root), else "". The loop agents stand for hosts with
// GPUs of their own, not for ranks sharing this machine's few: on a
// one-GPU machine every agent would say it has that GPU, and the launcher
// rightly refuses eight ranks a host ("8 ranks x 1 GPU need 8 GPUs"). With
// it hidden they have none, as on a machine without GPUs.
func gpusToHide() string {
	if os.Geteuid() != 0 {
		return ""
	}
	if fi, err := os.Stat(gpuProcDir); err != nil || !fi.IsDir() {
		return ""
	}
	return gpuProcDir
}

// loopStartupLimits are the login bounds of a bed of n loop agents:
// sshd's defaults up to 1,024, scalebed.Limits above (the scale runs give
// the launcher scalebed.SSHConfig with them).
func loopStartupLimits(n int) sshd.StartupLimits {
	if n <= 1024 {
		return sshd.StartupLimits{}
	}
	return scalebed.Limits
}

// startLoopWorker starts one worker and waits for its "ready" line. A
// non-empty hide is a directory the worker covers with an empty tmpfs in
// a mount namespace of its own before its agents start; lim's non-zero
// bounds replace the agents' defaults.
func startLoopWorker(ctx context.Context, self, dir string, first, n int, hide string, lim sshd.StartupLimits) (*loopWorker, error) {
	args := []string{"-loop-agents", "-dir", dir, "-first", strconv.Itoa(first), "-n", strconv.Itoa(n),
		"-version-timeout", lim.VersionTimeout.String(), "-login-grace-time", lim.LoginGraceTime.String()}
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if hide != "" {
		args = append(args, "-hide", hide)
		attr.Unshareflags = syscall.CLONE_NEWNS // Go makes the new namespace's mounts private
	}
	cmd := exec.Command(self, args...)
	cmd.SysProcAttr = attr
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start agents %d..%d: %w", first, first+n-1, err)
	}
	w := &loopWorker{cmd: cmd, stdin: stdin, first: first, n: n}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && !strings.HasPrefix(line, "ready") {
			err = fmt.Errorf("said %q", strings.TrimSpace(line))
		}
		ready <- err
		_, _ = io.Copy(io.Discard, stdout) // until it exits
	}()
	t := time.NewTimer(2 * time.Minute)
	defer t.Stop()
	select {
	case err = <-ready:
	case <-t.C:
		err = errors.New("not listening after 2m")
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		w.stop()
		return nil, fmt.Errorf("agents %d..%d: %w", first, first+n-1, err)
	}
	return w, nil
}

// stop closes the worker's stdin (it then ends its agents and exits),
// and kills it after 30 s.
func (w *loopWorker) stop() {
	w.stdin.Close()
	done := make(chan struct{})
	go func() { _ = w.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = w.cmd.Process.Kill()
		<-done
	}
}

func (la *loopAgents) stop() {
	var wg sync.WaitGroup
	for _, w := range la.workers {
		wg.Go(w.stop)
	}
	wg.Wait()
}

// pids are the workers' process ids.
func (la *loopAgents) pids() []int {
	var out []int
	for _, w := range la.workers {
		out = append(out, w.cmd.Process.Pid)
	}
	return out
}

// cpu is the workers' own user+system time so far (not their reaped
// children's: the ranks), from /proc/PID/stat, in 10 ms ticks.
func (la *loopAgents) cpu() time.Duration {
	self, _ := cpuTimes(la.pids())
	return time.Duration(self) * clockTick
}

// hostfile writes an Open MPI hostfile of the first n agents, slots
// each.
func (la *loopAgents) hostfile(n, slots int) (string, error) {
	var s strings.Builder
	for _, a := range la.addrs[:n] {
		fmt.Fprintf(&s, "%s slots=%d\n", a, slots)
	}
	path := filepath.Join(la.keys.Dir, fmt.Sprintf("hosts-%dx%d", n, slots))
	return path, os.WriteFile(path, []byte(s.String()), 0o644)
}

func (la *loopAgents) args(hf string) []string {
	return []string{"-i", la.keys.ClientKey, "--known-hosts", la.kh, "-p", strconv.Itoa(loopPort), "-hostfile", hf}
}

// loopWorkerMain is gwbench -loop-agents: it serves agents FIRST..FIRST+N-1
// with the keys in DIR, says "ready" on stdout once all listen, and ends
// them when stdin closes or ctx ends.
func loopWorkerMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gwbench -loop-agents", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory holding the keys (sshtest.GenKeys)")
	first := fs.Int("first", 0, "index of the first agent")
	n := fs.Int("n", 0, "number of agents")
	hide := fs.String("hide", "", "a directory to cover with an empty tmpfs first (the worker runs in a mount namespace of its own)")
	var lim sshd.StartupLimits
	fs.DurationVar(&lim.VersionTimeout, "version-timeout", 0, "the agents' --version-timeout (0: its default)")
	fs.DurationVar(&lim.LoginGraceTime, "login-grace-time", 0, "the agents' --login-grace-time (0: its default)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" || *n < 1 || *first < 0 || *first+*n > maxLoopAgents {
		fmt.Fprintln(stderr, "gwbench -loop-agents: need -dir, -n >= 1 and agents within", maxLoopAgents)
		return 2
	}
	if *hide != "" {
		if err := syscall.Mount("gwbench-hidden", *hide, "tmpfs", syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "size=4k"); err != nil {
			fmt.Fprintf(stderr, "gwbench -loop-agents: hide %s: %v\n", *hide, err)
			return 1
		}
	}
	hostKey, err := loadSigner(filepath.Join(*dir, "host_ed25519"))
	if err != nil {
		fmt.Fprintln(stderr, "gwbench -loop-agents:", err)
		return 1
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := *first; i < *first+*n; i++ {
		l, err := net.Listen("tcp", net.JoinHostPort(loopAddr(i), strconv.Itoa(loopPort)))
		if err != nil {
			fmt.Fprintf(stderr, "gwbench -loop-agents: agent %d: %v\n", i, err)
			cancel()
			return 1
		}
		// NoCgroup: agents that share a cgroup parent race each other
		// there (one's first-use Sweep can take the group another has
		// just made; seen as ranks failing to start with ENOENT and
		// hosts that never confirm their ranks' end), and the parent
		// here is the machine's, shared with everyone's tests.
		//
		// No nvidia-smi: these agents stand for nodes with GPUs of their
		// own, and thousands of them asking one machine's driver at once
		// (a lent GPU machine) each waited out nvidia-smi's 20 s bound
		// and failed the gpu-driver health check. Their GPU checks say
		// "not checked", as on a host without nvidia-smi.
		a := &agent.Agent{Name: "l" + strconv.Itoa(i), Version: "gwbench", Log: zap.NewNop(), NoCgroup: true,
			Facts: facts.Options{NvidiaSMI: noNvidiaSMI}}
		srv := &sshd.Server{
			Subsystem:      a.ServeLogin,
			Log:            zap.NewNop(),
			HostKey:        hostKey,
			AuthorizedKeys: filepath.Join(*dir, "authorized_keys"),
			StartupLimits:  lim,
		}
		wg.Go(func() { _ = srv.Serve(ctx, l) })
	}
	fmt.Fprintf(stdout, "ready %d\n", *n)
	go func() { _, _ = io.Copy(io.Discard, stdin); cancel() }() // ends with stdin or with ctx
	<-ctx.Done()
	return 0
}

// noNvidiaSMI is a loop agent's nvidia-smi: not installed.
func noNvidiaSMI(context.Context, ...string) ([]byte, error) {
	return nil, &exec.Error{Name: "nvidia-smi", Err: exec.ErrNotFound}
}

func loadSigner(path string) (ssh.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}
