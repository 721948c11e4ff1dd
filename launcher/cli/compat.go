package cli

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gangway/hostfile"
)

// compatInputs are the spellings of other launchers (torchrun, mpirun,
// horovodrun, DeepSpeed) that need the hosts before they mean something;
// resolveCompat turns them into Config values.
type compatInputs struct {
	nprocPerNode int    // torchrun --nproc-per-node, DeepSpeed --num_gpus
	nnodes       string // torchrun --nnodes, DeepSpeed --num_nodes
	standalone   bool   // torchrun --standalone
	prefix       string // mpirun --prefix
}

// registerCompat registers the other launchers' spellings. Flags that are
// plain synonyms set the Config directly.
func (c *Config) registerCompat(fs *flag.FlagSet) {
	in := &c.in.compat
	for _, n := range []string{"nproc-per-node", "nproc_per_node", "num_gpus"} {
		fs.IntVar(&in.nprocPerNode, n, 0, "ranks per host (torchrun, DeepSpeed): N slots on each host; locally -np N")
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
	fs.BoolVar(&c.Out.DisplayMap, "display-map", false, "print the placement table on stderr, then run (mpirun)")
	fs.BoolVar(&c.Out.MergeStderr, "merge-stderr-to-stdout", false, "rank stderr goes to the launcher's stdout (mpirun)")
	fs.Bool("nooversubscribe", false, "accepted for mpirun compatibility: not oversubscribing is the default")
	for _, n := range []string{"q", "quiet"} {
		fs.BoolVar(&c.Out.Quiet, n, false, "no informational launcher lines (logs below warnings, restart notices, progress, summary)")
	}
	fs.StringVar(&in.prefix, "prefix", "", "mpirun's install prefix: --agent-path DIR/bin/agent for -transport ssh|slurm")
	fs.StringVar(&c.Network.Interface, "network-interfaces", "", "horovodrun's spelling of --network-interface")
}

// resolveCompat applies the other launchers' spellings once the hosts are
// known: --standalone, --include/--exclude as hosts, --nnodes,
// --nproc-per-node (compatHosts), -map-by's ppr and PE forms and -rank-by
// (compatMapping), --prefix.
func (c *Config) resolveCompat() error {
	if err := c.compatHosts(); err != nil {
		return err
	}
	if err := c.compatMapping(); err != nil {
		return err
	}
	p := &c.Place
	if c.Mode == ModeOpenMPI && len(c.notForOpenMPI()) > 0 {
		return fmt.Errorf("%w: --mpi=openmpi runs Open MPI's mpirun, which gets no -map-by PE or ppr:N:socket, -rank-by, --display-map or --merge-stderr-to-stdout from gangway: drop them, or drop --mpi=openmpi", ErrUsage)
	}
	if p.PE > 0 && p.BindTo != "none" && p.BindTo != "core" {
		return fmt.Errorf("%w: PE=%d binds each rank to %d CPUs; it cannot be combined with -bind-to %s", ErrUsage, p.PE, p.PE, p.BindTo)
	}
	if in := c.in.compat; in.prefix != "" && !c.in.given["agent-path"] {
		c.Transport.AgentPath = filepath.Join(in.prefix, "bin", "agent")
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

// compatHosts applies the spellings that choose the hosts and their
// slots: torchrun's --standalone, --nnodes and --nproc-per-node,
// DeepSpeed's --include and --exclude.
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
			return fmt.Errorf("%w: --nnodes %d: only %d hosts (%s)", ErrUsage, n, have, p.Source)
		}
		if p.Source != HostsLocal {
			p.Hosts = p.Hosts[:n]
		}
	}
	if n := in.nprocPerNode; n != 0 {
		if n < 0 || n > hostfile.MaxSlotCount {
			return fmt.Errorf("%w: --nproc-per-node %d: want 1 to %d", ErrUsage, n, hostfile.MaxSlotCount)
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
	}
	return nil
}

// compatMapping resolves -map-by's ppr:N:UNIT and PE=n forms into the
// placement (-N, PerSocket, PE), and checks -rank-by.
func (c *Config) compatMapping() error {
	p := &c.Place
	m, err := parseMapBy(p.MapBy)
	if err != nil {
		return fmt.Errorf("%w: -map-by: %v", ErrUsage, err)
	}
	p.MapBy, p.PE = m.By, m.PE
	switch m.Unit {
	case "node":
		if c.in.given["N"] || c.in.given["npernode"] {
			if p.NPerNode != m.PPR {
				return fmt.Errorf("%w: -N %d and -map-by ppr:%d:node disagree", ErrUsage, p.NPerNode, m.PPR)
			}
		}
		p.NPerNode = m.PPR
	case "socket":
		if p.NPerNode != 0 {
			return fmt.Errorf("%w: -N and -map-by ppr:N:socket: give one", ErrUsage)
		}
		p.PerSocket = m.PPR
	}
	switch p.RankBy {
	case "", "slot", "node":
	default:
		return fmt.Errorf("%w: -rank-by %q is not supported: use slot or node (ranks by core, socket or NUMA node follow from -map-by ppr:N:socket and -bind-to)", ErrUsage, p.RankBy)
	}
	return nil
}

// BindSpec is the agent's binding (wire.StartJob.Bind) for the placement:
// pe=N for -map-by ...:PE=N, socket:N for -map-by ppr:N:socket (unless
// -bind-to says otherwise), else -bind-to.
func (p Placement) BindSpec() string {
	switch {
	case p.PE > 0:
		return "pe=" + strconv.Itoa(p.PE)
	case p.PerSocket > 0 && (p.BindTo == "none" || p.BindTo == "socket"):
		return "socket:" + strconv.Itoa(p.PerSocket)
	}
	return p.BindTo
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

// mapBy is a parsed -map-by: slot or node, optionally with ppr:N:UNIT
// (N ranks per node or socket) and PE=n (n CPUs per rank).
type mapBy struct {
	By   string // slot | node: how hosts are filled
	PPR  int    // ranks per Unit, 0 without ppr
	Unit string // node | socket, "" without ppr
	PE   int    // CPUs per rank, 0 without PE
}

// parseMapBy parses Open MPI's -map-by forms gangway honours: slot, node,
// ppr:N:node, ppr:N:socket, each optionally followed by :PE=n (except
// ppr:N:socket).
func parseMapBy(s string) (mapBy, error) {
	parts := strings.Split(s, ":")
	var m mapBy
	rest := parts[1:]
	switch strings.ToLower(parts[0]) {
	case "slot", "":
		m.By = "slot"
	case "node":
		m.By = "node"
	case "ppr":
		if len(parts) < 3 {
			return m, fmt.Errorf("%q: want ppr:N:node or ppr:N:socket", s)
		}
		n, err := strconv.Atoi(parts[1])
		if err != nil || n < 1 || n > hostfile.MaxSlotCount {
			return m, fmt.Errorf("%q: ranks per unit %q: want 1 to %d", s, parts[1], hostfile.MaxSlotCount)
		}
		m.By, m.PPR, m.Unit = "slot", n, strings.ToLower(parts[2])
		if m.Unit != "node" && m.Unit != "socket" {
			return m, fmt.Errorf("%q: ppr unit %q is not supported (use node or socket)", s, parts[2])
		}
		rest = parts[3:]
	default:
		return m, fmt.Errorf("%q is not supported (use slot, node, ppr:N:node, ppr:N:socket, optionally with :PE=n)", s)
	}
	for _, mod := range rest {
		k, v, ok := strings.Cut(mod, "=")
		if !ok || !strings.EqualFold(k, "PE") || m.PE != 0 {
			return m, fmt.Errorf("%q: modifier %q is not supported (only PE=n; oversubscription is -oversubscribe)", s, mod)
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1<<16 {
			return m, fmt.Errorf("%q: PE=%q: want CPUs per rank from 1 to %d", s, v, 1<<16)
		}
		m.PE = n
	}
	if m.Unit == "socket" && m.PE > 0 {
		return m, fmt.Errorf("%q: PE with ppr:N:socket is not supported (use ppr:N:node:PE=n, or ppr:N:socket alone, which binds each rank to its socket)", s)
	}
	return m, nil
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
	for _, dir := range dirs {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			if len(out) == 1 && sameFile(out[0], p) {
				continue
			}
			out = append(out, p)
		}
	}
	return out
}

func sameFile(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}
