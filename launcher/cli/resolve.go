package cli

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// resolveHosts reads -H and hostfiles, else the hostfile Kubeflow's
// mpi-operator names, else a Slurm or PBS allocation, else leaves the job
// on this machine. The operator's variables come before Slurm's: they are
// set only in its launcher pod, where a Slurm variable could only have
// leaked from the image or the node.
func (c *Config) resolveHosts(getenv func(string) string) error {
	p := &c.Place
	sources := [][]hostfile.Host{p.Hosts}
	for _, l := range c.in.hostLists {
		hs, err := hostfile.ParseList(l)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUsage, err)
		}
		sources = append(sources, hs)
		p.Source = HostsList
	}
	for _, f := range c.in.hostfiles {
		hs, err := hostfile.ParseFile(f)
		if err != nil {
			return fmt.Errorf("cannot read hostfile: %w", err)
		}
		sources = append(sources, hs)
		p.Source, p.Hostfile = HostsFile, f
	}
	if len(sources) > 1 {
		hs, err := hostfile.Merge(sources...)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUsage, err)
		}
		p.Hosts = hs
	}
	for _, h := range p.Hosts {
		// Merging sources can take a host past the limits each
		// source checked alone.
		if err := h.Validate(); err != nil {
			return fmt.Errorf("%w: %v", ErrUsage, err)
		}
	}
	if len(p.Hosts) > 0 {
		return nil
	}
	if hs, v, path, ok, err := hostfile.FromMPIOperator(getenv); err != nil {
		return fmt.Errorf("mpi-operator hostfile: %w", err)
	} else if ok {
		p.Hosts, p.Source, p.Hostfile, p.HostfileVar = hs, HostsMPIOperator, path, v
		c.Transport.MPIOperator = getenv(mpiOperatorRoleEnv) == "launcher"
		if c.Transport.MPIOperator && !c.in.given["p"] && !c.in.given["port"] {
			portFromSSHConfig(&c.Transport, sshClientConfig)
		}
		return nil
	}
	if hs, ok, err := hostfile.FromSlurm(getenv); err != nil {
		return fmt.Errorf("slurm allocation: %w", err)
	} else if ok {
		p.Hosts, p.Source = hs, HostsSlurm
		return nil
	}
	if hs, ok, err := hostfile.FromPBS(getenv); err != nil {
		return fmt.Errorf("PBS allocation: %w", err)
	} else if ok {
		p.Hosts, p.Source = hs, HostsPBS
		return nil
	}
	p.Source = HostsLocal
	return nil
}

// sshClientConfig is the system ssh configuration mpirun's ssh reads in
// an mpi-operator launcher pod; tests point it elsewhere.
var sshClientConfig = "/etc/ssh/ssh_config"

// portFromSSHConfig takes the agents' port from the Port an ssh
// configuration sets for every host, as mpirun's ssh would dial it
// (mpi-operator's images set Port 2222 there, and in the workers'
// sshd_config, which the agent reads in a worker pod).
func portFromSSHConfig(t *transport.Options, path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	if port, ok := hostfile.SSHConfigPort(f); ok {
		t.Port, t.PortFrom, t.PortGiven = port, path, true
	}
}

// mpiOperatorRoleEnv is the variable mpi-operator sets in its pods:
// "launcher" or "worker".
const mpiOperatorRoleEnv = "K_MPI_JOB_ROLE"

// resolveInputs turns -x, --env-file, --stdin and --output-from into
// their Config values.
func (c *Config) resolveInputs(environ []string) error {
	var err error
	if c.Env.Vars, c.Env.Sources, c.Env.Warnings, err = resolveEnv(c.in.exports, c.in.envFiles, environ); err != nil {
		return err
	}
	c.Env.Launcher = environ
	if err := c.resolveForward(); err != nil {
		return err
	}
	if c.Out.Stdin, err = parseStdin(c.in.stdin); err != nil {
		return err
	}
	if c.in.outputFrom != "" {
		if c.Out.From, err = plan.ParseRankSet(c.in.outputFrom); err != nil {
			return fmt.Errorf("%w: --output-from: %v", ErrUsage, err)
		}
	}
	return nil
}

// TimeoutEnv is the variable Hydra and Open MPI's mpiexec read as a job
// time limit in seconds; without --timeout, the launcher reads it too.
const TimeoutEnv = "MPIEXEC_TIMEOUT"

// resolveTimeout makes MPIEXEC_TIMEOUT (seconds, or a duration as
// --timeout takes) the --timeout of a command line that gives none, so a
// script written for mpiexec keeps its limit. A value that is not a time
// is a usage error: a typo must not let a job run unbounded.
func (c *Config) resolveTimeout(getenv func(string) string) error {
	v := getenv(TimeoutEnv)
	if c.in.given["timeout"] || v == "" {
		return nil
	}
	if err := (durationSecs{&c.Control.Timeout}).Set(strings.TrimSpace(v)); err != nil {
		return fmt.Errorf("%w: %s=%q: %v", ErrUsage, TimeoutEnv, v, err)
	}
	return nil
}

// TreeWidthEnv is --tree-width's default when the command line gives
// none, as MPIEXEC_TIMEOUT is --timeout's: a site (or a test suite) may
// put every job through relays without changing its scripts. A job whose
// transport starts every agent itself (ssh, slurm) stays flat under it.
const TreeWidthEnv = "GANGWAY_TREE_WIDTH"

// resolveTreeWidth reads TreeWidthEnv when --tree-width is not given.
func (c *Config) resolveTreeWidth(getenv func(string) string) error {
	c.Transport.TreeWidthGiven = c.in.given["tree-width"]
	v := getenv(TreeWidthEnv)
	if c.in.given["tree-width"] || v == "" {
		return nil
	}
	if err := (treeWidthFlag{&c.Transport.TreeWidth}).Set(strings.TrimSpace(v)); err != nil {
		return fmt.Errorf("%w: %s=%q: %v", ErrUsage, TreeWidthEnv, v, err)
	}
	return nil
}

// resolveEnv expands --env-file and then -x and -genv (in command-line
// order) into one map of the values every rank gets, and where each came
// from (SrcEnvFile, SrcX, SrcGenv); a later entry for the same name wins.
// As Open MPI's mpirun, -x NAME for a variable the launcher's environment
// lacks is a warning, not an error; so is -x or -genv on a variable the
// launcher sets per rank (RANK, OMPI_COMM_WORLD_RANK, ...), which is
// ignored.
func resolveEnv(xs []envArg, files []string, environ []string) (map[string]string, map[string]string, []string, error) {
	var warns []string
	ignored := func(flag, k string) {
		warns = append(warns, fmt.Sprintf("%s %s is ignored: the launcher sets %s for each rank", flag, k, k))
	}
	vals, srcs := map[string]string{}, map[string]string{}
	set := func(k, v, src string) { vals[k], srcs[k] = v, src }
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("cannot read env file: %w", err)
		}
		lines, err := ParseEnvFile(f, b)
		if err != nil {
			return nil, nil, nil, err
		}
		for _, l := range lines {
			set(l.Key, l.Value, SrcEnvFile)
		}
	}
	for _, x := range xs {
		k, v, hasVal := strings.Cut(x.arg, "=")
		switch {
		case hasVal:
			if !wire.ValidEnvName(k) {
				return nil, nil, nil, fmt.Errorf("%w: %s %q: bad variable name", ErrUsage, x.flag, x.arg)
			}
			if plan.IsIdentity(k) {
				ignored(x.flag, k)
			}
			set(k, v, x.flag)
		case strings.HasSuffix(k, "*"):
			prefix := strings.TrimSuffix(k, "*")
			for _, e := range environ {
				if ek, ev, ok := strings.Cut(e, "="); ok && strings.HasPrefix(ek, prefix) {
					set(ek, ev, x.flag)
				}
			}
		default:
			if !wire.ValidEnvName(k) {
				return nil, nil, nil, fmt.Errorf("%w: %s %q: bad variable name", ErrUsage, x.flag, x.arg)
			}
			if plan.IsIdentity(k) {
				ignored(x.flag, k)
				continue
			}
			found := false
			for _, e := range environ {
				if ek, ev, ok := strings.Cut(e, "="); ok && ek == k {
					set(k, ev, x.flag)
					found = true
				}
			}
			if !found {
				warns = append(warns, fmt.Sprintf("%s %s: not set in the launcher's environment; the ranks do not get it", x.flag, k))
			}
		}
	}
	return vals, srcs, warns, nil
}

func parseStdin(s string) (int, error) {
	if s == "none" {
		return -1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: --stdin %q: want a rank or none", ErrUsage, s)
	}
	return n, nil
}
