package launcher

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"gangway/agent/wire"
	"gangway/hostfile"
)

// Config is a validated command line.
type Config struct {
	NP            int
	Hosts         []hostfile.Host
	HostSource    string // "-H", hostfile path, "slurm", "pbs" or "local"
	NPerNode      int
	MapBy         string // slot | node
	BindTo        string // none | numa | core
	Oversubscribe bool
	AllowRoot     bool
	Dir           string

	Env     []string // -x and --env-file, resolved to KEY=VALUE, in order
	MCA     []string // OMPI_MCA_KEY=VALUE
	GPUsPer int

	TagOutput      bool
	Timestamp      bool
	OutputDir      string
	OutputFrom     RankSet
	Stdin          int // rank, or -1 for none
	Timeout        time.Duration
	KillGrace      time.Duration
	StartTimeout   time.Duration
	DryRun         bool
	Verbose        bool
	LogFormat      string
	Version        bool
	Help           bool
	MPI            string // auto | pmi | none
	Transport      string // agent | ssh
	Port           int
	AgentPath      string
	SSHCommand     string
	Identity       string
	KnownHosts     string
	AcceptNewHosts bool
	Metrics        []string
	MetricScope    string
	WarmupSteps    int
	Straggler      float64
	BaselineIPS    float64
	ReportFile     string
	PlotFile       string
	Analyze        bool
	NoSummary      bool
	// Network and node preparation.
	NetworkInterface     string
	Preflight            bool
	DropCaches           int
	DropCachesBestEffort bool
	Inspect              bool
	JSON                 bool
	GPUFilter            GPUFilter
	ReportBindings       bool
	Argv                 []string // the program and its arguments
}

// ErrUsage marks command-line errors (exit code 2).
var ErrUsage = errors.New("usage")

// Defaults used by Parse.
const (
	DefaultPort         = 22122
	DefaultKillGrace    = 5 * time.Second
	DefaultStartTimeout = 60 * time.Second
)

type listFlag struct{ v *[]string }

func (l listFlag) String() string {
	if l.v == nil {
		return ""
	}
	return strings.Join(*l.v, ",")
}
func (l listFlag) Set(s string) error { *l.v = append(*l.v, s); return nil }

// mcaFlag collects "-mca KEY VALUE" pairs; the argv pre-pass joins the two
// words as KEY=VALUE.
type mcaFlag struct{ v *[]string }

func (m mcaFlag) String() string { return "" }
func (m mcaFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want -mca KEY VALUE, got %q", s)
	}
	*m.v = append(*m.v, "OMPI_MCA_"+k+"="+v)
	return nil
}

type durationSecs struct{ d *time.Duration }

func (d durationSecs) String() string {
	if d.d == nil {
		return "0"
	}
	return strconv.FormatFloat(d.d.Seconds(), 'f', -1, 64)
}
func (d durationSecs) Set(s string) error {
	if dd, err := time.ParseDuration(s); err == nil && dd >= 0 {
		*d.d = dd
		return nil
	}
	// !(f >= 0) also rejects NaN; the upper bound keeps the conversion
	// to Duration from overflowing.
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !(f >= 0) || f > float64(math.MaxInt64/int64(time.Second)) {
		return fmt.Errorf("want seconds or a duration like 90s, got %q", s)
	}
	*d.d = time.Duration(f * float64(time.Second))
	return nil
}

// twoWordFlags take two words (mpirun's -mca KEY VALUE).
var twoWordFlags = map[string]bool{"mca": true, "gmca": true}

func newFlagSet(c *Config, hostList, hostfiles, xs, envFiles *[]string, stdin *string, outFrom *string) *flag.FlagSet {
	fs := flag.NewFlagSet("launcher", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, n := range []string{"np", "n"} {
		fs.IntVar(&c.NP, n, 0, "number of ranks (default: all slots)")
	}
	for _, n := range []string{"H", "host"} {
		fs.Var(listFlag{hostList}, n, "hosts: [user@]host[:slots[:port]],... (repeatable)")
	}
	for _, n := range []string{"hostfile", "machinefile", "f"} {
		fs.Var(listFlag{hostfiles}, n, "hostfile (Open MPI, MPICH or PBS format)")
	}
	fs.Var(listFlag{xs}, "x", "export NAME, NAME=VALUE or 'PREFIX*' to every rank (repeatable)")
	fs.Var(listFlag{envFiles}, "env-file", "file of KEY=VALUE lines exported to every rank (repeatable)")
	for _, n := range []string{"mca", "gmca"} {
		fs.Var(mcaFlag{&c.MCA}, n, "KEY VALUE: set OMPI_MCA_KEY=VALUE in every rank")
	}
	fs.BoolVar(&c.AllowRoot, "allow-run-as-root", false, "accepted for mpirun compatibility (gangway runs as root without it)")
	fs.StringVar(&c.BindTo, "bind-to", "none", "CPU binding: none, numa (the CPUs of the rank's GPU's NUMA node) or core")
	fs.StringVar(&c.MapBy, "map-by", "slot", "rank placement: slot (fill each host) or node (round robin)")
	for _, n := range []string{"N", "npernode"} {
		fs.IntVar(&c.NPerNode, n, 0, "ranks per host")
	}
	fs.BoolVar(&c.Oversubscribe, "oversubscribe", false, "allow more ranks than slots")
	for _, n := range []string{"wdir", "wd"} {
		fs.StringVar(&c.Dir, n, "", "working directory of every rank (default: the launcher's)")
	}
	fs.IntVar(&c.GPUsPer, "gpus-per-rank", 1, "GPUs given to each rank in CUDA_VISIBLE_DEVICES on hosts with GPUs")
	fs.BoolVar(&c.TagOutput, "tag-output", false, "tag lines as mpirun does: [1,RANK]<stdout>:")
	fs.BoolVar(&c.Timestamp, "timestamp-output", false, "prefix every line with the time it arrived")
	fs.StringVar(&c.OutputDir, "output-filename", "", "also write DIR/rank.R/stdout and stderr")
	fs.StringVar(outFrom, "output-from", "", "show only these ranks on the console, e.g. 0,4-7 (files keep all)")
	fs.StringVar(stdin, "stdin", "0", "rank that receives the launcher's stdin, or none")
	fs.Var(durationSecs{&c.Timeout}, "timeout", "stop the job after SECONDS (or a duration such as 10m) and exit 124")
	fs.DurationVar(&c.KillGrace, "kill-grace", DefaultKillGrace, "time between SIGTERM and SIGKILL when stopping ranks")
	fs.Var(durationSecs{&c.StartTimeout}, "start-timeout", "how long to wait for every host's agent (seconds or duration)")
	fs.BoolVar(&c.DryRun, "dry-run", false, "print the placement and every rank's environment, start nothing")
	fs.BoolVar(&c.Verbose, "v", false, "verbose logging")
	fs.StringVar(&c.LogFormat, "log-format", "console", "log format: console or json")
	fs.BoolVar(&c.Version, "version", false, "print the version and exit")
	for _, n := range []string{"h", "help"} {
		fs.BoolVar(&c.Help, n, false, "show help")
	}
	fs.StringVar(&c.MPI, "mpi", "auto", "MPI bootstrap: auto (serve PMI to every rank), pmi, none, or openmpi (run Open MPI's mpirun over the agents)")
	fs.StringVar(&c.Transport, "transport", "agent", "how to reach hosts: agent (an agent listening on --port) or ssh (start 'agent --stdio' through the system ssh)")
	for _, n := range []string{"p", "port"} {
		fs.IntVar(&c.Port, n, DefaultPort, "agent SSH port (per-host ports: host:slots:port or port= in a hostfile)")
	}
	fs.StringVar(&c.AgentPath, "agent-path", "agent", "path of the agent binary on the hosts, for --transport ssh")
	fs.StringVar(&c.SSHCommand, "ssh", "ssh", "ssh command line for --transport ssh (e.g. \"ssh -F /dev/null -o StrictHostKeyChecking=no\")")
	fs.StringVar(&c.Identity, "i", "", "SSH identity file (default: SSH_AUTH_SOCK, then ~/.ssh/id_ed25519, id_ecdsa, id_rsa)")
	fs.StringVar(&c.KnownHosts, "known-hosts", "", "known_hosts file (default ~/.ssh/known_hosts)")
	fs.BoolVar(&c.AcceptNewHosts, "accept-new-host-keys", false, "trust and record host keys seen for the first time")
	fs.Var(listFlag{&c.Metrics}, "metric", "NAME=REGEX: extra throughput recogniser with a named group 'value' (repeatable)")
	fs.StringVar(&c.MetricScope, "metric-scope", "rank", "scope of --metric values: rank (summed) or global")
	fs.IntVar(&c.WarmupSteps, "warmup-steps", -1, "samples per rank to skip as warm-up (default: the tool's own, else 10%)")
	fs.Float64Var(&c.Straggler, "straggler-threshold", 0.05, "flag ranks this fraction below the median")
	fs.Float64Var(&c.BaselineIPS, "baseline-ips", 0, "single-GPU throughput, for scaling efficiency")
	fs.StringVar(&c.ReportFile, "report", "", "write the throughput report as JSON to FILE")
	fs.StringVar(&c.PlotFile, "plot", "", "draw per-rank throughput over time to FILE.png")
	fs.BoolVar(&c.Analyze, "analyze", false, "analyse saved logs (the arguments) instead of running a job")
	fs.BoolVar(&c.NoSummary, "no-summary", false, "do not print the throughput summary")
	fs.StringVar(&c.NetworkInterface, "network-interface", "", "force the data interface(s) NAME[,NAME] on every host")
	fs.BoolVar(&c.Preflight, "preflight", true, "before starting, check that every host reaches every other host's agent (multi-host jobs)")
	fs.Var(dropCachesFlag{&c.DropCaches}, "drop-caches", "sync and drop page caches on every host first (=1|2|3, default 3)")
	fs.BoolVar(&c.DropCachesBestEffort, "drop-caches-best-effort", false, "go on when a host cannot drop its caches")
	fs.BoolVar(&c.Inspect, "inspect", false, "print every host's facts and the environment the launcher would set, then exit")
	fs.BoolVar(&c.JSON, "json", false, "with --inspect: JSON instead of a table")
	fs.Func("gpus", "GPU indices to use on every host, e.g. 0,2", func(s string) (err error) {
		c.GPUFilter.All, err = parseGPUList(s)
		return err
	})
	fs.Func("include", "only these GPUs on these hosts: host:0,1@host2:2,3", func(s string) (err error) {
		c.GPUFilter.Include, err = parseHostGPUs(s)
		return err
	})
	fs.Func("exclude", "not these GPUs (or none of a host's, without a list): host:0@host2", func(s string) (err error) {
		c.GPUFilter.Exclude, err = parseHostGPUs(s)
		return err
	})
	fs.BoolVar(&c.ReportBindings, "report-bindings", false, "print each rank's CPU binding")
	return fs
}

// splitArgs finds where the launcher's options end and the program
// begins, and rewrites "-mca KEY VALUE" into "-mca KEY=VALUE".
func splitArgs(fs *flag.FlagSet, args []string) (opts, prog []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return opts, args[i+1:], nil
		}
		if len(a) < 2 || a[0] != '-' {
			return opts, args[i:], nil
		}
		name := strings.TrimLeft(a, "-")
		name, _, hasVal := strings.Cut(name, "=")
		if twoWordFlags[name] && !hasVal {
			if i+2 >= len(args) {
				return nil, nil, fmt.Errorf("%w: %s needs KEY and VALUE", ErrUsage, a)
			}
			opts = append(opts, "-"+name+"="+args[i+1]+"="+args[i+2])
			i += 2
			continue
		}
		opts = append(opts, a)
		f := fs.Lookup(name)
		if f == nil {
			return nil, nil, fmt.Errorf("%w: unknown option %s (see launcher -h)", ErrUsage, a)
		}
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
			continue
		}
		if !hasVal {
			if i+1 >= len(args) {
				return nil, nil, fmt.Errorf("%w: %s needs a value", ErrUsage, a)
			}
			i++
			opts = append(opts, args[i])
		}
	}
	return opts, nil, nil
}

// Parse turns argv (without the program name) into a validated Config.
// getenv reads the launcher's environment (for -x and Slurm/PBS).
func Parse(args []string, getenv func(string) string, environ []string) (Config, error) {
	var c Config
	var hostList, hostfiles, xs, envFiles []string
	var stdin, outFrom string
	c.StartTimeout = DefaultStartTimeout
	fs := newFlagSet(&c, &hostList, &hostfiles, &xs, &envFiles, &stdin, &outFrom)
	opts, prog, err := splitArgs(fs, args)
	if err != nil {
		return c, err
	}
	if err := fs.Parse(opts); err != nil {
		return c, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	c.Argv = prog
	// Counts are checked even for -h and --analyze, so that no Config
	// Parse accepts has a negative one (Main still prints -h's help).
	switch {
	case c.NP < 0:
		return c, fmt.Errorf("%w: -np %d: must be positive", ErrUsage, c.NP)
	case c.NPerNode < 0:
		return c, fmt.Errorf("%w: -N %d: must be positive", ErrUsage, c.NPerNode)
	}
	if c.Help || c.Version {
		return c, nil
	}
	if len(c.Argv) == 0 && c.Inspect {
		if err := c.resolveHosts(hostList, hostfiles, getenv); err != nil {
			return c, err
		}
		return c, c.validate()
	}
	if len(c.Argv) == 0 {
		return c, fmt.Errorf("%w: no program given (launcher [options] PROGRAM [ARGS...])", ErrUsage)
	}
	if c.Analyze {
		return c, c.validateBench()
	}
	if err := c.resolveHosts(hostList, hostfiles, getenv); err != nil {
		return c, err
	}
	if c.Env, err = resolveEnv(xs, envFiles, environ); err != nil {
		return c, err
	}
	if c.Stdin, err = parseStdin(stdin); err != nil {
		return c, err
	}
	if outFrom != "" {
		if c.OutputFrom, err = ParseRankSet(outFrom); err != nil {
			return c, fmt.Errorf("%w: --output-from: %v", ErrUsage, err)
		}
	}
	return c, c.validate()
}

func (c *Config) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrUsage}, a...)...)
	}
	switch {
	case c.MapBy != "slot" && c.MapBy != "node":
		return bad("-map-by %q is not supported (use slot or node)", c.MapBy)
	case c.BindTo != "none" && c.BindTo != "numa" && c.BindTo != "core":
		return bad("-bind-to %q is not supported (use none, numa or core)", c.BindTo)
	case c.GPUsPer < 1:
		return bad("--gpus-per-rank %d: must be at least 1", c.GPUsPer)
	case c.KillGrace < 0:
		return bad("--kill-grace must not be negative")
	case c.LogFormat != "console" && c.LogFormat != "json":
		return bad("--log-format %q: use console or json", c.LogFormat)
	case c.MPI != "auto" && c.MPI != "pmi" && c.MPI != "none" && c.MPI != "openmpi":
		return bad("--mpi %q: use auto, pmi, none or openmpi", c.MPI)
	case c.Transport != "agent" && c.Transport != "ssh":
		return bad("--transport %q: use agent or ssh", c.Transport)
	case c.Port < 1 || c.Port > 65535:
		return bad("--port %d out of range", c.Port)
	}
	return c.validateBench()
}

func (c *Config) validateBench() error {
	if c.MetricScope != "rank" && c.MetricScope != "global" {
		return fmt.Errorf("%w: --metric-scope %q: use rank or global", ErrUsage, c.MetricScope)
	}
	if c.Straggler < 0 || c.Straggler >= 1 {
		return fmt.Errorf("%w: --straggler-threshold %v: want a fraction in [0,1)", ErrUsage, c.Straggler)
	}
	return nil
}

func (c *Config) resolveHosts(list, files []string, getenv func(string) string) error {
	for _, l := range list {
		hs, err := hostfile.ParseList(l)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUsage, err)
		}
		c.Hosts = mergeHosts(c.Hosts, hs)
		c.HostSource = "-H"
	}
	for _, f := range files {
		hs, err := hostfile.ParseFile(f)
		if err != nil {
			return fmt.Errorf("cannot read hostfile: %w", err)
		}
		c.Hosts = mergeHosts(c.Hosts, hs)
		c.HostSource = f
	}
	for _, h := range c.Hosts {
		// Merging sources can take a host past the limits each
		// source checked alone.
		if err := h.Validate(); err != nil {
			return fmt.Errorf("%w: %v", ErrUsage, err)
		}
	}
	if len(c.Hosts) > 0 {
		return nil
	}
	if hs, ok, err := hostfile.FromSlurm(getenv); err != nil {
		return fmt.Errorf("slurm allocation: %w", err)
	} else if ok {
		c.Hosts, c.HostSource = hs, "slurm"
		return nil
	}
	if hs, ok, err := hostfile.FromPBS(getenv); err != nil {
		return fmt.Errorf("PBS allocation: %w", err)
	} else if ok {
		c.Hosts, c.HostSource = hs, "pbs"
		return nil
	}
	c.HostSource = "local"
	return nil
}

func mergeHosts(a, b []hostfile.Host) []hostfile.Host {
	for _, h := range b {
		found := false
		for i := range a {
			if a[i].Name == h.Name && a[i].User == h.User && a[i].Port == h.Port {
				a[i].Slots += h.Slots
				// As hostfile merges: caps add, and one uncapped
				// occurrence lifts the cap.
				if a[i].MaxSlots == 0 || h.MaxSlots == 0 {
					a[i].MaxSlots = 0
				} else {
					a[i].MaxSlots = min(a[i].MaxSlots+h.MaxSlots, hostfile.MaxSlotCount)
				}
				found = true
				break
			}
		}
		if !found {
			a = append(a, h)
		}
	}
	return a
}

// resolveEnv expands -x and --env-file into KEY=VALUE entries. A later
// entry for the same key wins.
func resolveEnv(xs, files []string, environ []string) ([]string, error) {
	vals := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("cannot read env file: %w", err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			line = strings.TrimPrefix(line, "export ")
			k, v, ok := strings.Cut(line, "=")
			if !ok || !wire.ValidEnvName(k) {
				return nil, fmt.Errorf("%w: %s:%d: want KEY=VALUE, got %q", ErrUsage, f, i+1, line)
			}
			set(k, unquote(v))
		}
	}
	for _, x := range xs {
		k, v, hasVal := strings.Cut(x, "=")
		switch {
		case hasVal:
			if !wire.ValidEnvName(k) {
				return nil, fmt.Errorf("%w: -x %q: bad variable name", ErrUsage, x)
			}
			set(k, v)
		case strings.HasSuffix(k, "*"):
			prefix := strings.TrimSuffix(k, "*")
			var ks []string
			matched := map[string]string{}
			for _, e := range environ {
				if ek, ev, ok := strings.Cut(e, "="); ok && strings.HasPrefix(ek, prefix) {
					ks = append(ks, ek)
					matched[ek] = ev
				}
			}
			sort.Strings(ks)
			for _, ek := range ks {
				set(ek, matched[ek])
			}
		default:
			if !wire.ValidEnvName(k) {
				return nil, fmt.Errorf("%w: -x %q: bad variable name", ErrUsage, x)
			}
			found := false
			for _, e := range environ {
				if ek, ev, ok := strings.Cut(e, "="); ok && ek == k {
					set(k, ev)
					found = true
				}
			}
			if !found {
				return nil, fmt.Errorf("%w: -x %s: not set in the launcher's environment", ErrUsage, k)
			}
		}
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vals[k])
	}
	return out, nil
}

func unquote(v string) string {
	if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
		return v[1 : len(v)-1]
	}
	return v
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

func flagNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}
