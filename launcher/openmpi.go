package launcher

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"gangway/hostfile"
)

// Open MPI programs: Debian's Open MPI has no PMI-1/PMI-2 client, so
// --mpi=openmpi runs Open MPI's own mpirun with gangway's agents as its
// ssh transport. The transport is this binary in --rsh mode (x/crypto/ssh
// with the launcher's identity and known_hosts), so nothing of OpenSSH's
// client configuration is involved. Limits: mpirun launches every orted
// itself (routed_radix >= hosts: the launcher binary exists only on the
// jump host, so orteds cannot launch further orteds), and each orted runs
// in the foreground of its agent session, so the agent stops it (and its
// ranks) when mpirun's connection goes; every host must have orted on its PATH;
// ranks get Open MPI's own OMPI_COMM_WORLD_* environment plus the -x and
// -mca settings (not the per-host NCCL variables, which mpirun's -x cannot
// vary by host); mpirun tags and forwards the output.

// openMPIArgs builds mpirun's command line (without the program).
func openMPIArgs(cfg Config, self string, hostfilePath string, np int, root bool) ([]string, error) {
	port := cfg.Port
	for _, h := range cfg.Hosts {
		if h.Port != 0 && h.Port != port {
			if port != cfg.Port {
				return nil, fmt.Errorf("--mpi=openmpi: hosts use different ports (%d, %d); mpirun takes one ssh command for all", port, h.Port)
			}
			port = h.Port
		}
	}
	rsh := []string{self, "--rsh", "-p", strconv.Itoa(port)}
	if cfg.Identity != "" {
		rsh = append(rsh, "-i", cfg.Identity)
	}
	if cfg.KnownHosts != "" {
		rsh = append(rsh, "--known-hosts", cfg.KnownHosts)
	}
	if cfg.AcceptNewHosts {
		rsh = append(rsh, "--accept-new-host-keys")
	}
	for _, w := range rsh {
		if strings.ContainsAny(w, " \t\"'") {
			return nil, fmt.Errorf("--mpi=openmpi: %q contains spaces or quotes, which mpirun's plm_rsh_agent cannot carry", w)
		}
	}
	// Tree spawn stays on, with a radix of at least the host count, so
	// mpirun itself starts every orted and in the foreground: with
	// plm_rsh_no_tree_spawn it would add --daemonize, and daemonized
	// orteds leave the agents' supervision.
	args := []string{"--hostfile", hostfilePath, "-np", strconv.Itoa(np), "--map-by", cfg.MapBy,
		"--bind-to", "none",
		"--mca", "plm_rsh_agent", strings.Join(rsh, " "),
		"--mca", "routed_radix", strconv.Itoa(max(64, len(cfg.Hosts)+1))}
	if root {
		args = append(args, "--allow-run-as-root")
	}
	if cfg.Oversubscribe {
		args = append(args, "--oversubscribe")
	}
	if cfg.TagOutput {
		args = append(args, "--tag-output")
	}
	if cfg.Timestamp {
		args = append(args, "--timestamp-output")
	}
	if cfg.Dir != "" {
		args = append(args, "--wdir", cfg.Dir)
	}
	for _, kv := range cfg.MCA {
		k, v, _ := strings.Cut(strings.TrimPrefix(kv, "OMPI_MCA_"), "=")
		args = append(args, "--mca", k, v)
	}
	env := append([]string{"PYTHONUNBUFFERED=1"}, cfg.Env...)
	for _, kv := range env {
		args = append(args, "-x", kv)
	}
	return args, nil
}

// RunOpenMPI runs cfg through Open MPI's mpirun and returns its exit code.
func RunOpenMPI(ctx context.Context, cfg Config, d Deps) int {
	mpirun, err := exec.LookPath("mpirun.openmpi")
	if err != nil {
		if mpirun, err = exec.LookPath("mpirun"); err != nil {
			fmt.Fprintf(d.Stderr, "launcher: --mpi=openmpi needs Open MPI's mpirun (Debian: apt-get install openmpi-bin): %v\n", err)
			return ExitSetup
		}
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
		return ExitSetup
	}
	hosts := cfg.Hosts
	if cfg.HostSource == "local" {
		hosts = []hostfile.Host{{Name: "localhost", Slots: max(cfg.NP, 1)}}
	}
	np := cfg.NP
	if np == 0 {
		np = hostfile.TotalSlots(hosts)
	}
	dir, err := os.MkdirTemp("", "gangway-ompi-")
	if err != nil {
		fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
		return ExitSetup
	}
	defer os.RemoveAll(dir)
	hf := filepath.Join(dir, "hostfile")
	f, err := os.Create(hf)
	if err == nil {
		plain := make([]hostfile.Host, len(hosts))
		for i, h := range hosts {
			plain[i] = hostfile.Host{Name: h.Name, User: h.User, Slots: h.Slots, MaxSlots: h.MaxSlots}
		}
		err = hostfile.Format(f, plain)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(d.Stderr, "launcher: write mpirun hostfile: %v\n", err)
		return ExitSetup
	}
	args, err := openMPIArgs(cfg, self, hf, np, os.Geteuid() == 0)
	if err != nil {
		fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
		return ExitUsage
	}
	args = append(args, cfg.Argv...)
	d.Log.Debug("running mpirun")
	cmd := exec.Command(mpirun, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = d.Stdin, d.Stdout, d.Stderr
	// Pdeathsig: if the launcher is killed, mpirun dies too; its orteds
	// lose their lifeline and their agent sessions, and stop their ranks.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(d.Stderr, "launcher: start %s: %v\n", mpirun, err)
		return ExitSetup
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var timeout <-chan time.Time
	if cfg.Timeout > 0 {
		timeout = time.After(cfg.Timeout)
	}
	code := -1
	signals := 0
	timedOut := false
	for code < 0 {
		select {
		case err := <-done:
			code = exitCodeOf(cmd.ProcessState, err)
		case s := <-d.Signals:
			// mpirun stops its job on SIGINT/SIGTERM; a second signal kills
			// mpirun's process group (its rsh children), and the agents then
			// stop the orteds and their ranks when the connections drop.
			signals++
			if signals == 1 {
				_ = cmd.Process.Signal(s)
			} else {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
		case <-timeout:
			fmt.Fprintf(d.Stderr, "launcher: --timeout %v expired, stopping mpirun\n", cfg.Timeout)
			_ = cmd.Process.Signal(syscall.SIGTERM)
			time.AfterFunc(cfg.KillGrace, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
			timeout = nil
			timedOut = true
		case <-ctx.Done():
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	if timedOut {
		return ExitTimeout
	}
	return code
}

func exitCodeOf(ps *os.ProcessState, err error) int {
	if ps == nil {
		return ExitSetup
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// Rsh is the launcher's `--rsh` mode, an ssh-compatible client for
// mpirun's plm_rsh_agent: `launcher --rsh [-p PORT] [-i KEY]
// [--known-hosts FILE] [--accept-new-host-keys] HOST COMMAND...` runs
// COMMAND (words joined by spaces, as ssh does) on HOST's agent and exits
// with its status (255 when the connection fails or the command dies of a
// signal, as ssh).
func Rsh(ctx context.Context, args []string, d Deps) int {
	fs := flag.NewFlagSet("launcher --rsh", flag.ContinueOnError)
	fs.SetOutput(d.Stderr)
	var cfg Config
	fs.IntVar(&cfg.Port, "p", DefaultPort, "port")
	fs.StringVar(&cfg.Identity, "i", "", "identity")
	fs.StringVar(&cfg.KnownHosts, "known-hosts", "", "known_hosts")
	fs.BoolVar(&cfg.AcceptNewHosts, "accept-new-host-keys", false, "trust new host keys")
	fs.Bool("x", false, "no X11 forwarding (ignored)")
	if err := fs.Parse(args); err != nil {
		return 255
	}
	if fs.NArg() < 2 {
		fmt.Fprintln(d.Stderr, "launcher --rsh: usage: launcher --rsh [options] HOST COMMAND...")
		return 255
	}
	hosts, err := hostfile.ParseList(fs.Arg(0))
	if err != nil || len(hosts) != 1 {
		fmt.Fprintf(d.Stderr, "launcher --rsh: bad host %q\n", fs.Arg(0))
		return 255
	}
	dialer, err := newSSHDialer(cfg, d.Log)
	if err != nil {
		fmt.Fprintf(d.Stderr, "launcher --rsh: %v\n", err)
		return 255
	}
	client, _, err := dialer.client(ctx, hosts[0])
	if err != nil {
		fmt.Fprintf(d.Stderr, "launcher --rsh: %s: %v\n", fs.Arg(0), err)
		return 255
	}
	defer client.Close()
	sess, err := client.NewSession()
	if err != nil {
		fmt.Fprintf(d.Stderr, "launcher --rsh: %s: %v\n", fs.Arg(0), err)
		return 255
	}
	defer sess.Close()
	sess.Stdout, sess.Stderr = d.Stdout, d.Stderr
	if in, err := sess.StdinPipe(); err == nil && d.Stdin != nil {
		go func() { _, _ = io.Copy(in, d.Stdin); in.Close() }()
	}
	err = sess.Run(strings.Join(fs.Args()[1:], " "))
	var ee *ssh.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee) && ee.Signal() == "":
		return ee.ExitStatus()
	default:
		fmt.Fprintf(d.Stderr, "launcher --rsh: %s: %v\n", fs.Arg(0), err)
		return 255
	}
}
