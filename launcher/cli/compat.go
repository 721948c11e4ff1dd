package cli

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/internal/textx"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// compatInputs are the spellings of other launchers (torchrun, mpirun,
// Hydra, horovodrun, DeepSpeed) that need the hosts or other flags
// before they mean something; resolveCompat turns them into Config
// values.
type compatInputs struct {
	nprocPerNode string // torchrun --nproc-per-node N|gpu|cpu|auto, DeepSpeed --num_gpus
	nnodes       string // torchrun --nnodes, DeepSpeed --num_nodes
	standalone   bool   // torchrun --standalone
	prefix       string // mpirun --prefix
	module       bool   // torchrun -m, DeepSpeed --module
	sshPort      int    // horovodrun --ssh-port, DeepSpeed --ssh_port
	launcher     string // Hydra -launcher/-bootstrap, DeepSpeed --launcher
	cpusPerProc  int    // mpirun --cpus-per-proc
}

// registerCompat registers the other launchers' spellings. Flags that are
// plain synonyms set the Config directly; the options gangway does not
// register are in foreignFlags.
func (c *Config) registerCompat(fs *flag.FlagSet) {
	in, p := &c.in.compat, &c.Place
	for _, n := range []string{"nproc-per-node", "nproc_per_node", "num_gpus"} {
		fs.StringVar(&in.nprocPerNode, n, "", "ranks per host (torchrun, DeepSpeed): N slots on each host (locally -np N); gpu, cpu or auto (GPUs, else CPUs): each host's count")
	}
	for _, n := range []string{"nnodes", "num_nodes"} {
		fs.StringVar(&in.nnodes, n, "", "use the first N hosts (torchrun, DeepSpeed)")
	}
	fs.BoolVar(&in.standalone, "standalone", false, "this machine only (torchrun)")
	for _, n := range []string{"master-addr", "master_addr"} {
		fs.StringVar(&c.Env.MasterAddr, n, "", "MASTER_ADDR of every rank, used as is (default: rank 0's host's data address)")
	}
	for _, n := range []string{"master-port", "master_port"} {
		fs.IntVar(&c.Env.MasterPort, n, 0, "MASTER_PORT of every rank, used as is (default: a port free on rank 0's host)")
	}
	fs.StringVar(&c.Place.RankBy, "rank-by", "", "rank order: slot (a host's ranks consecutive) or node (round robin over hosts); default follows -map-by")
	for _, n := range []string{"display-map", "print-rank-map"} {
		fs.BoolVar(&c.Out.DisplayMap, n, false, "print the placement table on stderr, then run (mpirun; Intel MPI's -print-rank-map)")
	}
	fs.BoolVar(&c.Out.MergeStderr, "merge-stderr-to-stdout", false, "rank stderr goes to the launcher's stdout (mpirun)")
	fs.Bool("nooversubscribe", false, "accepted for mpirun compatibility: not oversubscribing is the default")
	for _, n := range []string{"q", "quiet"} {
		fs.BoolVar(&c.Out.Quiet, n, false, "no informational launcher lines (logs below warnings, restart notices, progress, summary)")
	}
	fs.StringVar(&in.prefix, "prefix", "", "mpirun's install prefix: --agent-path DIR/bin/agent for -transport ssh|slurm")
	fs.StringVar(&c.Network.Interface, "network-interfaces", "", "horovodrun's spelling of --network-interface")
	fs.StringVar(&c.Network.Interface, "iface", "", "Hydra's spelling of --network-interface")
	for _, n := range []string{"c", "num-proc"} {
		fs.IntVar(&p.NP, n, 0, "number of ranks (mpirun's -c, horovodrun's --num-proc)")
	}
	for _, n := range []string{"ppn", "perhost"} {
		fs.IntVar(&p.NPerNode, n, 0, "ranks per host (Hydra, Intel MPI): -N N, each host given at least N slots")
	}
	fs.BoolFunc("pernode", "one rank per host (mpirun): -N 1", func(string) error { p.NPerNode = 1; return nil })
	fs.BoolFunc("rr", "ranks round robin over the hosts (Intel MPI): -map-by node", func(string) error { p.MapBy = "node"; return nil })
	fs.BoolFunc("bynode", "-map-by node (Open MPI 1.x)", func(string) error { p.MapBy = "node"; return nil })
	fs.BoolFunc("byslot", "-map-by slot (Open MPI 1.x)", func(string) error { p.MapBy = "slot"; return nil })
	for _, n := range []string{"cpus-per-proc", "cpus-per-rank"} {
		fs.IntVar(&in.cpusPerProc, n, 0, "CPUs bound to each rank (Open MPI 1.x-4): -map-by slot:PE=N")
	}
	fs.Var(listFlag{&c.in.hostLists}, "hosts", "Hydra's -H: host[:n],...")
	fs.Func("output", "Open MPI 5's --output: tag, timestamp, merge-stderr-to-stdout, dir=DIR (comma-separated)", c.Out.setOMPIOutput)
	fs.Func("display", "Open MPI 5's --display: map (--display-map), bind (--report-bindings)", c.Out.setOMPIDisplay)
	for _, n := range []string{"launcher", "bootstrap"} {
		fs.StringVar(&in.launcher, n, "", "how hosts are reached (Hydra, Intel MPI, DeepSpeed): ssh or pdsh (-transport ssh), slurm (-transport slurm), openmpi (-mpi openmpi); mpich, impi, mvapich: the default")
	}
	fs.Var(modeFlag{&c.Mode, ModeVersion}, "V", "print the version and exit (mpirun)")
	fs.BoolVar(&c.Out.Verbose, "verbose", false, "verbose logging (horovodrun, Hydra): -v")
	for _, n := range []string{"ssh-port", "ssh_port"} {
		fs.IntVar(&in.sshPort, n, 0, "the port hosts are reached on (horovodrun, DeepSpeed): -p N, or ssh -p N with -transport ssh")
	}
	fs.StringVar(&c.Transport.Identity, "ssh-identity-file", "", "horovodrun's spelling of -i")
	fs.IntVar(&c.Control.MaxRestarts, "max_restarts", 0, "torchrun's spelling of --max-restarts")
	for _, n := range []string{"log-dir", "log_dir", "enable_each_rank_log"} {
		fs.StringVar(&c.Out.Dir, n, "", "per-rank output files (torchrun, DeepSpeed): --output-filename DIR")
	}
	for _, n := range []string{"rdzv-id", "rdzv_id"} {
		fs.StringVar(&c.Control.RunID, n, "", "torchrun's rendezvous id: --run-id (TORCHELASTIC_RUN_ID)")
	}
	for _, n := range []string{"m", "module"} {
		fs.BoolVar(&in.module, n, false, "PROGRAM is a Python module (torchrun, DeepSpeed): run python3 -m PROGRAM ARGS")
	}
	fs.BoolFunc("no_ssh_check", "DeepSpeed's: -preflight=false", func(string) error { c.Network.Preflight = false; return nil })
}

// setOMPIOutput is Open MPI 5's --output LIST.
func (o *Output) setOMPIOutput(s string) error {
	for _, w := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(w, "=")
		switch strings.ToLower(k) {
		case "tag", "tag-detailed", "tag-fullname":
			o.Tags = plan.TagMpirun
		case "timestamp":
			o.Timestamp = true
		case "merge-stderr-to-stdout":
			o.MergeStderr = true
		case "dir":
			if v == "" {
				return fmt.Errorf("dir=DIR: no directory")
			}
			o.Dir = v
		default:
			return fmt.Errorf("%q is not supported: use tag, timestamp, merge-stderr-to-stdout or dir=DIR (per-rank files; file= is not supported)", w)
		}
	}
	return nil
}

// setOMPIDisplay is Open MPI 5's --display LIST.
func (o *Output) setOMPIDisplay(s string) error {
	for _, w := range strings.Split(s, ",") {
		switch strings.ToLower(w) {
		case "map", "map-devel":
			o.DisplayMap = true
		case "bind", "bindings":
			o.ReportBindings = true
		default:
			return fmt.Errorf("%q is not supported: use map (--display-map) or bind (--report-bindings); --inspect prints every host's facts", w)
		}
	}
	return nil
}

// resolveCompat applies the other launchers' spellings once the hosts are
// known: --standalone, --include/--exclude as hosts, --nnodes,
// --nproc-per-node (compatHosts), -map-by's forms, -bind-to's qualifiers,
// --cpus-per-proc and -rank-by (compatMapping), -launcher, --ssh-port,
// -m, --prefix.
func (c *Config) resolveCompat() error {
	if err := c.compatLauncher(); err != nil {
		return err
	}
	if err := c.compatHosts(); err != nil {
		return err
	}
	if err := c.compatMapping(); err != nil {
		return err
	}
	p, in := &c.Place, c.in.compat
	if c.Mode == ModeOpenMPI && len(c.notForOpenMPI()) > 0 {
		return fmt.Errorf("%w: --mpi=openmpi runs Open MPI's mpirun, which gets no %s from gangway: drop them, or drop --mpi=openmpi", ErrUsage, strings.Join(c.notForOpenMPI(), ", "))
	}
	if p.PE > 0 && p.BindTo != "none" && p.BindTo != "core" && p.BindTo != "hwthread" {
		return fmt.Errorf("%w: PE=%d binds each rank to %s; it cannot be combined with -bind-to %s", ErrUsage, p.PE, textx.Count(p.PE, "CPU"), p.BindTo)
	}
	if p.FactSlots != "" && p.PerSocket > 0 {
		return fmt.Errorf("%w: --nproc-per-node %s and -map-by ppr:N:socket both set each host's slots from its facts: give one", ErrUsage, p.FactSlots)
	}
	if in.prefix != "" && !c.in.given["agent-path"] {
		c.Transport.AgentPath = filepath.Join(in.prefix, "bin", "agent")
	}
	if err := c.compatSSHPort(); err != nil {
		return err
	}
	if in.module {
		// torchrun runs its own interpreter; the hosts' python3 is ours.
		c.Argv = append([]string{"python3", "-m"}, c.Argv...)
	}
	if c.Env.MasterPort < 0 || c.Env.MasterPort > 65535 {
		return fmt.Errorf("%w: --master-port %d out of range", ErrUsage, c.Env.MasterPort)
	}
	if c.Out.Quiet {
		c.Bench.NoSummary = true
		c.Out.Progress, c.Out.ProgressAuto = false, false
	}
	return nil
}

// compatLauncher applies Hydra's and Intel MPI's -launcher/-bootstrap
// and DeepSpeed's --launcher: how the hosts are reached.
func (c *Config) compatLauncher() error {
	v := c.in.compat.launcher
	var kind transport.Kind
	switch strings.ToLower(v) {
	case "":
		return nil
	case "ssh", "pdsh":
		kind = transport.SSH
	case "slurm":
		kind = transport.Slurm
	case "openmpi":
		c.in.mpi, c.Mode = "openmpi", max(c.Mode, ModeOpenMPI)
		return nil
	case "mpich", "impi", "mvapich", "hydra":
		return nil // the ranks are served PMI (--mpi auto), as their mpiexec would
	default:
		return fmt.Errorf("%w: -launcher %q is not supported: gangway reaches hosts through its agents (--transport agent), ssh (-launcher ssh, --transport ssh) or srun (-launcher slurm, --transport slurm); with no hosts it runs on this machine", ErrUsage, v)
	}
	if c.in.given["transport"] && c.Transport.Kind != kind {
		return fmt.Errorf("%w: -launcher %s and --transport %s disagree: give one", ErrUsage, v, c.in.transport)
	}
	c.Transport.Kind, c.in.transport, c.in.given["transport"] = kind, string(kind), true
	return nil
}

// compatSSHPort applies horovodrun's --ssh-port and DeepSpeed's
// --ssh_port: the port the hosts are reached on, which is the agents'
// (-p), or sshd's with --transport ssh.
func (c *Config) compatSSHPort() error {
	n := c.in.compat.sshPort
	if n == 0 {
		return nil
	}
	t := &c.Transport
	switch {
	case n < 0 || n > 65535:
		return fmt.Errorf("%w: --ssh-port %d out of range", ErrUsage, n)
	case t.Kind == transport.SSH:
		t.SSHCommand += " -p " + strconv.Itoa(n)
	case (c.in.given["p"] || c.in.given["port"]) && t.Port != n:
		return fmt.Errorf("%w: --ssh-port %d and -p %d disagree: give one (the port the agents listen on)", ErrUsage, n, t.Port)
	default:
		t.Port = n
	}
	return nil
}

// compatHosts applies the spellings that choose the hosts and their
// slots: torchrun's --standalone, --nnodes and --nproc-per-node,
// DeepSpeed's --include and --exclude, Hydra's -ppn.
func (c *Config) compatHosts() error {
	in, p := c.in.compat, &c.Place
	if in.standalone {
		if p.Source == HostsList || p.Source == HostsFile {
			return fmt.Errorf("%w: --standalone runs on this machine only; drop -H/--hostfile, or drop --standalone", ErrUsage)
		}
		p.Source, p.Hosts, p.Hostfile = HostsLocal, nil, ""
	}
	if p.Source != HostsLocal {
		hs, err := filterHosts(p.Hosts, p.GPUs.Include, p.GPUs.Exclude)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUsage, err)
		}
		p.Hosts = hs
	}
	if in.nnodes != "" {
		n, err := parseNNodes(in.nnodes)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUsage, err)
		}
		have := len(p.Hosts)
		if p.Source == HostsLocal {
			have = 1
		}
		if n > have {
			hint := ""
			if p.Source == HostsLocal {
				// torchrun's line is run on every node; gangway's once,
				// naming them.
				hint = "; name the hosts (-H host1,host2 or --hostfile FILE, or run in a Slurm allocation) and run this once, not on every node"
			}
			return fmt.Errorf("%w: --nnodes %d: only %s (%s)%s", ErrUsage, n, textx.Count(have, "host"), p.Source, hint)
		}
		if p.Source != HostsLocal {
			p.Hosts = p.Hosts[:n]
		}
	}
	if c.in.given["ppn"] || c.in.given["perhost"] {
		// Hydra places -ppn N ranks on a host whatever its count says.
		if p.NPerNode > hostfile.MaxSlotCount {
			return fmt.Errorf("%w: -ppn %d: want 1 to %d", ErrUsage, p.NPerNode, hostfile.MaxSlotCount)
		}
		for i := range p.Hosts {
			if h := &p.Hosts[i]; h.Slots < p.NPerNode {
				h.Slots = p.NPerNode
				if h.MaxSlots != 0 {
					h.MaxSlots = max(h.MaxSlots, h.Slots)
				}
			}
		}
	}
	switch v := strings.ToLower(in.nprocPerNode); v {
	case "":
		return nil
	case "gpu", "cpu", "auto":
		p.FactSlots = v
		return nil
	}
	n, err := strconv.Atoi(in.nprocPerNode)
	if err != nil || n < 1 || n > hostfile.MaxSlotCount {
		return fmt.Errorf("%w: --nproc-per-node %s: want 1 to %d, gpu, cpu or auto", ErrUsage, in.nprocPerNode, hostfile.MaxSlotCount)
	}
	if p.Source == HostsLocal {
		if p.NP != 0 && p.NP != n {
			return fmt.Errorf("%w: -np %d and --nproc-per-node %d disagree on one host", ErrUsage, p.NP, n)
		}
		p.NP = n
	}
	for i := range p.Hosts {
		p.Hosts[i].Slots = n
		if p.Hosts[i].MaxSlots != 0 {
			p.Hosts[i].MaxSlots = max(p.Hosts[i].MaxSlots, n)
		}
	}
	return nil
}

// parseNNodes parses torchrun's --nnodes N or MIN:MAX; only a fixed size
// (N, or MIN:MAX with MIN == MAX) is accepted.
func parseNNodes(s string) (int, error) {
	lo, hi, elastic := strings.Cut(s, ":")
	a, err := strconv.Atoi(lo)
	if err != nil || a < 1 {
		return 0, fmt.Errorf("--nnodes %q: want a number of hosts", s)
	}
	if elastic {
		b, err := strconv.Atoi(hi)
		if err != nil || b != a {
			return 0, fmt.Errorf("--nnodes %q: elastic sizes are not supported; gangway runs a fixed-size gang and restarts it whole (--nnodes N with --max-restarts K)", s)
		}
	}
	return a, nil
}

// filterHosts applies DeepSpeed's --include/--exclude to the hosts: with
// --include only the named hosts run ranks, and a host named with GPUs
// gets one slot per listed GPU; --exclude drops a host named alone and
// takes a slot from a host for each of its listed GPUs below its slot
// count (DeepSpeed's hostfile slots are GPUs 0..slots-1). A host not in
// the list is an error, as is giving both.
func filterHosts(hosts []hostfile.Host, include, exclude map[string][]int) ([]hostfile.Host, error) {
	if include != nil && exclude != nil {
		return nil, fmt.Errorf("--include and --exclude: give one (as DeepSpeed)")
	}
	if include == nil && exclude == nil {
		return hosts, nil
	}
	known := func(m map[string][]int, flag string) error {
		var unknown []string
		for name := range m {
			if !slices.ContainsFunc(hosts, func(h hostfile.Host) bool { return h.Name == name }) {
				unknown = append(unknown, name)
			}
		}
		if len(unknown) > 0 {
			slices.Sort(unknown)
			return fmt.Errorf("%s: host %s is not among the hosts (-H, hostfile or allocation)", flag, strings.Join(unknown, ", "))
		}
		return nil
	}
	var out []hostfile.Host
	if include != nil {
		if err := known(include, "--include"); err != nil {
			return nil, err
		}
		for _, h := range hosts {
			list, ok := include[h.Name]
			if !ok {
				continue
			}
			if list != nil {
				h.Slots = len(dedupe(list))
			}
			out = append(out, h)
		}
		return out, nil
	}
	if err := known(exclude, "--exclude"); err != nil {
		return nil, err
	}
	for _, h := range hosts {
		list, ok := exclude[h.Name]
		switch {
		case !ok:
		case list == nil:
			continue
		default:
			n := h.Slots
			for _, g := range dedupe(list) {
				if g >= 0 && g < n {
					h.Slots--
				}
			}
			if h.Slots == 0 {
				continue
			}
		}
		out = append(out, h)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--exclude leaves no hosts")
	}
	return out, nil
}

func dedupe(l []int) []int {
	l = slices.Clone(l)
	slices.Sort(l)
	return slices.Compact(l)
}

// deepSpeedEnvFiles are the .deepspeed_env files DeepSpeed's launcher
// reads, in its order: $HOME's, then the working directory's (whose
// values win), named by $DS_ENV_FILE when set. Both are read when both
// exist; -x and --env-file win over them.
func deepSpeedEnvFiles(getenv func(string) string) []string {
	name := getenv("DS_ENV_FILE")
	if name == "" {
		name = ".deepspeed_env"
	}
	dirs := []string{getenv("HOME"), "."}
	if filepath.IsAbs(name) {
		dirs = []string{"/"}
	}
	var out []string
	var first os.FileInfo // out[0]'s, so that the second is not the same file
	for _, dir := range dirs {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, name)
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() || first != nil && os.SameFile(first, st) {
			continue
		}
		if first == nil {
			first = st
		}
		out = append(out, p)
	}
	return out
}
