package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/internal/osproc"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/diagnose"
	"github.com/gangway-hpc/gangway/launcher/engine"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/launcher/rankenv"
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
func openMPIArgs(cfg cli.Config, self string, hostfilePath string, np int, root bool) ([]string, error) {
	t := cfg.Transport
	port := t.Port
	for _, h := range cfg.Place.Hosts {
		if h.Port != 0 && h.Port != port {
			if port != t.Port {
				return nil, fmt.Errorf("--mpi=openmpi: hosts use different ports (%d, %d); mpirun takes one ssh command for all", port, h.Port)
			}
			port = h.Port
		}
	}
	rsh := []string{self, "--rsh"}
	if t.PortGiven || port != t.Port {
		rsh = append(rsh, "-p", strconv.Itoa(port))
	}
	if t.SSHConfig != "" {
		rsh = append(rsh, "-F", t.SSHConfig)
	}
	if t.Identity != "" {
		rsh = append(rsh, "-i", t.Identity)
	}
	if t.KnownHosts != "" {
		rsh = append(rsh, "--known-hosts", t.KnownHosts)
	}
	if t.AcceptNewHosts {
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
	args := []string{"--hostfile", hostfilePath, "-np", strconv.Itoa(np), "--map-by", cfg.Place.MapBy,
		"--bind-to", "none",
		"--mca", "plm_rsh_agent", strings.Join(rsh, " "),
		"--mca", "routed_radix", strconv.Itoa(max(64, len(cfg.Place.Hosts)+1))}
	if root {
		args = append(args, "--allow-run-as-root")
	}
	if cfg.Place.Oversubscribe {
		args = append(args, "--oversubscribe")
	}
	if cfg.Out.Tags == plan.TagRank || cfg.Out.Tags == plan.TagMpirun {
		args = append(args, "--tag-output") // mpirun has no [R] style
	}
	if cfg.Out.Timestamp {
		args = append(args, "--timestamp-output")
	}
	if cfg.Env.Dir != "" {
		args = append(args, "--wdir", cfg.Env.Dir)
	}
	for _, kv := range cfg.Env.MCA {
		k, v, _ := strings.Cut(strings.TrimPrefix(kv, "OMPI_MCA_"), "=")
		args = append(args, "--mca", k, v)
	}
	args = append(args, "-x", "PYTHONUNBUFFERED=1")
	for _, kv := range sortedVars(cfg.Env.Vars) {
		args = append(args, "-x", kv)
	}
	return args, nil
}

// runOpenMPI runs cfg through Open MPI's mpirun and returns its exit code
// (124 on --timeout). First it reads what it needs of the hosts' facts
// (openMPIFacts: the local rank count, hosts sharing a hostname). mpirun stops its job on SIGINT/SIGTERM: the first
// signal (or the timeout) is passed to it, and mpirun's whole process
// group is killed after --kill-grace or at a second signal; the agents
// then stop the orteds and their ranks when the connections drop.
func runOpenMPI(ctx context.Context, cfg cli.Config, d engine.Deps, l rankenv.Layout) int {
	ctx, scope := engine.Begin(ctx, d.Signals, cfg.Control.Timeout)
	defer scope.End()
	if err := openMPIFacts(ctx, &cfg, d, l, os.Getenv); err != nil {
		if cause := context.Cause(ctx); cause != nil {
			err = cause
		}
		fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
		return diagnose.ExitCode(err, false)
	}
	cmd, cleanup, err := mpirunCommand(ctx, cfg)
	if err != nil {
		fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
		return diagnose.ExitCode(err, false)
	}
	defer cleanup()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = d.Stdin, d.Stdout, d.Stderr
	// Pdeathsig: if the launcher is killed, mpirun dies too; its orteds
	// lose their lifeline and their agent sessions, and stop their ranks.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		if cfg.Control.KillGrace == 0 {
			return osproc.KillGroup(cmd.Process.Pid, syscall.SIGKILL)
		}
		var se *diagnose.SignalError
		if errors.As(context.Cause(ctx), &se) {
			return cmd.Process.Signal(se.Signal)
		}
		fmt.Fprintf(d.Stderr, "launcher: %v, stopping mpirun\n", context.Cause(ctx))
		return cmd.Process.Signal(syscall.SIGTERM)
	}
	cmd.WaitDelay = cfg.Control.KillGrace
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(d.Stderr, "launcher: start %s: %v\n", cmd.Path, err)
		return diagnose.ExitSetup
	}
	d.Log.Debug("running mpirun", zap.Strings("args", cmd.Args))
	pid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	again := scope.Again()
	for {
		select {
		case err := <-done:
			// Whatever mpirun left in its group (rsh clients) goes with it.
			_ = osproc.KillGroup(pid, syscall.SIGKILL)
			var te *diagnose.TimeoutError
			if errors.As(context.Cause(ctx), &te) {
				return diagnose.ExitTimeout
			}
			return exitCodeOf(cmd.ProcessState, err)
		case <-again: // a second signal: mpirun's whole group, at once
			_ = osproc.KillGroup(pid, syscall.SIGKILL)
			again = nil
		}
	}
}

// mpirunCommand finds mpirun and writes the hostfile it reads; cleanup
// removes the hostfile.
func mpirunCommand(ctx context.Context, cfg cli.Config) (cmd *exec.Cmd, cleanup func(), err error) {
	mpirun, err := exec.LookPath("mpirun.openmpi")
	if err != nil {
		if mpirun, err = exec.LookPath("mpirun"); err != nil {
			return nil, nil, fmt.Errorf("--mpi=openmpi needs Open MPI's mpirun (Debian: apt-get install openmpi-bin): %w", err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	hosts := cfg.Place.Hosts
	if cfg.Place.Source == cli.HostsLocal {
		hosts = []hostfile.Host{plan.Local(max(cfg.Place.NP, 1))}
	}
	np := cfg.Place.NP
	if np == 0 {
		np = hostfile.TotalSlots(hosts)
	}
	dir, err := os.MkdirTemp("", "gangway-ompi-")
	if err != nil {
		return nil, nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	hf := filepath.Join(dir, "hostfile")
	if err := writeHostfile(hf, hosts); err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("write mpirun hostfile: %w", err)
	}
	args, err := openMPIArgs(cfg, self, hf, np, os.Geteuid() == 0)
	if err != nil {
		cleanup()
		return nil, nil, cli.UsageError(err)
	}
	cmd = exec.CommandContext(ctx, mpirun, append(args, cfg.Argv...)...)
	// The launcher's --timeout (MPIEXEC_TIMEOUT when not given) bounds
	// the job; mpirun, which reads MPIEXEC_TIMEOUT too, must not race it
	// with its own limit, message and exit code.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, cli.TimeoutEnv+"=") })
	return cmd, cleanup, nil
}

// writeHostfile writes hosts in Open MPI's format, without ports (mpirun
// passes one port to its rsh agent for all).
func writeHostfile(path string, hosts []hostfile.Host) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	plain := make([]hostfile.Host, len(hosts))
	for i, h := range hosts {
		plain[i] = hostfile.Host{Name: h.Name, User: h.User, Slots: h.Slots, MaxSlots: h.MaxSlots}
	}
	err = hostfile.Format(f, plain)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// exitCodeOf is mpirun's exit as bash reports it (128+N for signal N),
// or ExitSetup when it never ran.
func exitCodeOf(ps *os.ProcessState, err error) int {
	code, _, ok := osproc.ProcessExitCode(ps)
	if !ok {
		return diagnose.ExitSetup
	}
	return code
}

// sortedVars lists vars as sorted KEY=VALUE entries.
func sortedVars(vars map[string]string) []string {
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
