package cli

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// Config is a validated command line, grouped by the part of the launcher
// that reads it.
type Config struct {
	Place     Placement         // the plan and the GPUs: which hosts, how many ranks, where
	Env       Environment       // what every rank's environment and working directory are
	Out       Output            // the console, per-rank files, logs, stdin
	Transport transport.Options // how hosts are reached
	Network   Network           // node and network preparation before the ranks start
	Control   Control           // how a running job is bounded and stopped
	Health    Health            // what every host is checked for before each attempt
	Bench     Bench             // the throughput summary, report and plot
	Mode      Mode              // what the launcher does with the rest
	Argv      []string          // the program and its arguments (the logs, for --analyze)

	in flagInputs // raw flag values, resolved by Parse and then cleared
}

// Placement says where ranks run.
type Placement struct {
	Source   HostSource
	Hostfile string // the last hostfile read, when Source is HostsFile or HostsMPIOperator
	// HostfileVar is the variable that named Hostfile, when Source is
	// HostsMPIOperator (OMPI_MCA_orte_default_hostfile...).
	HostfileVar string
	Hosts       []hostfile.Host

	NP            int    // ranks; 0 means every slot
	NPerNode      int    // ranks per host; 0 means by slots
	MapBy         string // slot | node (Parse resolves ppr and PE forms)
	Oversubscribe bool
	BindTo        string // none | numa | core | hwthread | socket
	// PerSocket is N of -map-by ppr:N:socket: a host's slots are N per
	// socket, known from its facts. PE is -map-by's PE=n: n CPUs per rank.
	PerSocket, PE int
	// FactSlots, when set, gives each host as many slots as its facts
	// say (torchrun's --nproc-per-node): gpu (its GPUs), cpu (its CPUs)
	// or auto (its GPUs, else its CPUs).
	FactSlots string
	RankBy    string // slot | node | "" (as MapBy)
	GPUsPer   int    // GPUs in each rank's CUDA_VISIBLE_DEVICES
	GPUs      plan.GPUFilter
	// Spares is --spares: the last N hosts of the list stand by for
	// hosts left out (besides those the placement leaves without ranks).
	Spares int
}

// Environment is what the ranks get besides their identity.
type Environment struct {
	// Vars are -x, -genv and --env-file, resolved once to their values (a
	// later flag for the same name wins); Sources says which of SrcX,
	// SrcGenv, SrcEnvFile gave each.
	Vars    map[string]string
	Sources map[string]string
	// Forward is what of Launcher, the launcher's own environment as Parse
	// got it, every rank gets besides: all of it less the host-specific
	// names (ForwardAll, the default), nothing, or ForwardList's names
	// (launcher/rankenv.Forwarded is the rule).
	Forward     ForwardMode
	ForwardList []string
	Launcher    []string
	MCA         []string // OMPI_MCA_KEY=VALUE, in flag order
	Dir         string   // working directory of every rank; "" means the launcher's
	PMI         bool     // serve PMI-1/PMI-2 to every rank (--mpi auto|pmi)
	// MPIAuto is --mpi auto (the default): an Open MPI program is run
	// through Open MPI's mpirun (Config.DelegateToOpenMPI).
	MPIAuto bool
	// Universe is -usize: the universe size PMI tells ranks (MPI's
	// MPI_UNIVERSE_SIZE). 0 (not given) and UniverseInfinite answer -1,
	// unknown, as Hydra does; UniverseSystem is the slots of the hosts
	// that run ranks; a positive number is itself.
	Universe int
	// MasterAddr and MasterPort (--master-addr, --master-port) replace the
	// MASTER_ADDR and MASTER_PORT the launcher chooses; "" and 0: choose.
	MasterAddr string
	MasterPort int
	// TFPort, when not 0 (--tf-config), gives every rank TF_CONFIG as
	// Kubeflow's TFJob writes it, each rank a worker listening on its
	// host's data address at TFPort plus its local rank.
	TFPort int
	// Warnings are -x entries that do nothing (unset, or a variable the
	// launcher sets per rank); Main prints them before the job.
	Warnings []string
}

// Special -usize values, Hydra's words.
const (
	UniverseInfinite = -1 // INFINITE
	UniverseSystem   = -2 // SYSTEM
)

// Output is how rank output and the launcher's own messages are shown.
type Output struct {
	// Tags is how console lines show their rank; plan.TagAuto (no flag
	// given) is resolved by Main from the launcher's stdout (Resolve).
	Tags           plan.TagStyle
	Timestamp      bool
	Dir            string // --output-filename
	From           plan.RankSet
	Stdin          int // the rank that gets the launcher's stdin, or -1
	ReportBindings bool
	DisplayMap     bool // print the placement on stderr before running
	MergeStderr    bool // rank stderr to the launcher's stdout
	Quiet          bool // no informational launcher lines
	// Progress prints a status line every ProgressEvery while ranks report
	// throughput; ProgressAuto (no --progress given) turns it on when
	// stderr is a terminal.
	Progress      bool
	ProgressAuto  bool
	ProgressEvery time.Duration
	JSON          bool // --inspect as JSON
	Verbose       bool
	LogFormat     string // console | json
}

// Network is the node and network preparation before ranks start.
type Network struct {
	Interface            string // --network-interface, "" for a choice per host
	Preflight            bool
	DropCaches           int // 0, or 1|2|3 for /proc/sys/vm/drop_caches
	DropCachesBestEffort bool
	// Selftest is --selftest: SelftestOff, SelftestReport or
	// SelftestStrict.
	Selftest string
}

// Forced is --network-interface's names, in order; nil for a choice per
// host.
func (n Network) Forced() []string {
	if n.Interface == "" {
		return nil
	}
	return strings.Split(n.Interface, ",")
}

// --selftest modes: off (default), report the fabric self-test's table
// and outliers and run the job, or stop the job when a host is slow.
const (
	SelftestOff    = ""
	SelftestReport = "report"
	SelftestStrict = "strict"
)

// Control bounds, stops and restarts a running job.
type Control struct {
	Timeout   time.Duration // the whole run, restarts included
	KillGrace time.Duration
	// MaxRestarts whole-gang restarts after a rank failure or a lost
	// agent, RestartBackoff apart; RunID names the run across them
	// (TORCHELASTIC_RUN_ID).
	MaxRestarts    int
	RestartBackoff time.Duration
	RunID          string
	// HangTimeout declares a hang when no rank printed anything for this
	// long: every rank's stacks are collected, then the job is stopped.
	HangTimeout time.Duration
}

// Bench is the throughput summary's configuration.
type Bench struct {
	Metrics     []string
	MetricScope string
	WarmupSteps int
	Straggler   float64
	BaselineIPS float64
	ReportFile  string
	PlotFile    string
	NoSummary   bool
}

// HostSource says where the hosts came from.
type HostSource int

// Host sources, in the order Parse tries them.
const (
	HostsLocal       HostSource = iota // none given: this machine, through the in-process agent
	HostsList                          // -H
	HostsFile                          // -hostfile
	HostsMPIOperator                   // Kubeflow mpi-operator's hostfile ($OMPI_MCA_orte_default_hostfile...)
	HostsSlurm                         // SLURM_JOB_NODELIST
	HostsPBS                           // $PBS_NODEFILE
)

func (s HostSource) String() string {
	return [...]string{"local", "-H", "hostfile", "mpi-operator", "slurm", "pbs"}[s]
}

// Mode is what the launcher does. When several mode flags are given, the
// highest one wins (help over version over analyze...).
type Mode int

// Modes, lowest precedence first.
const (
	ModeRun     Mode = iota // run the job through the agents
	ModeOpenMPI             // run Open MPI's mpirun with the agents as its transport
	ModeDryRun
	ModeInspect
	ModeAnalyze
	ModeVersion
	ModeHelp
)

// ErrUsage marks command-line errors (exit code 2).
var ErrUsage = errors.New("usage")

// usageError marks err as a usage error without changing its message.
type usageError struct{ error }

func (u usageError) Unwrap() error        { return u.error }
func (u usageError) Is(target error) bool { return target == ErrUsage }

// UsageError marks err as a usage error (exit code 2) without changing
// its message.
func UsageError(err error) error { return usageError{err} }

// Defaults used by Parse.
const (
	DefaultPort         = 22122
	DefaultKillGrace    = 5 * time.Second
	DefaultStartTimeout = 60 * time.Second
	// DefaultUnreachableGrace is --unreachable-grace's default: an agent
	// that is starting listens well within it (a restarted service, a
	// container's entrypoint, agents started by pdsh a moment earlier),
	// and the dial backoff (at most 2s) tries at least five times in it,
	// while a dead or mistyped host costs 10 s instead of the 60 s
	// --start-timeout.
	DefaultUnreachableGrace = 10 * time.Second
)

// Parse turns argv (without the program name) into a validated Config.
// getenv and environ are the launcher's environment (for -x, Slurm, PBS).
func Parse(args []string, getenv func(string) string, environ []string) (Config, error) {
	var c Config
	fs := c.flagSet()
	opts, prog, warns, err := splitArgs(fs, args)
	if err != nil {
		return c, err
	}
	if err := fs.Parse(opts); err != nil {
		return c, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	c.in.given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { c.in.given[f.Name] = true })
	c.Transport.PortGiven = c.in.given["p"] || c.in.given["port"]
	c.Argv = prog
	if c.in.mpi == "openmpi" {
		c.Mode = max(c.Mode, ModeOpenMPI)
	}
	// Counts are checked even for -h and --analyze, so that no Config
	// Parse accepts has a negative one (Main still prints -h's help).
	switch {
	case c.Place.NP < 0:
		return c, fmt.Errorf("%w: -np %d: must be positive", ErrUsage, c.Place.NP)
	case c.Place.NP > plan.MaxRanks:
		return c, fmt.Errorf("%w: -np %d: at most %d ranks", ErrUsage, c.Place.NP, plan.MaxRanks)
	case c.Place.NPerNode < 0:
		return c, fmt.Errorf("%w: -N %d: must be positive", ErrUsage, c.Place.NPerNode)
	case c.Place.Spares < 0:
		return c, fmt.Errorf("%w: --spares %d: must not be negative", ErrUsage, c.Place.Spares)
	}
	switch {
	case c.Mode == ModeHelp || c.Mode == ModeVersion:
		return c, nil
	case len(c.Argv) == 0 && c.Mode == ModeInspect:
		if err = c.resolveHosts(getenv); err == nil {
			err = c.resolveCompat()
		}
		if err == nil {
			// --inspect shows the NCCL variables a job would get: -x's and
			// the launcher's own too.
			c.in.envFiles = append(deepSpeedEnvFiles(getenv), c.in.envFiles...)
			err = c.resolveInputs(environ)
		}
	case len(c.Argv) == 0:
		return c, fmt.Errorf("%w: no program given (launcher [options] PROGRAM [ARGS...])", ErrUsage)
	case c.Mode == ModeAnalyze:
		c.in = flagInputs{}
		return c, c.Bench.validate()
	default:
		if err = c.resolveHosts(getenv); err == nil {
			err = c.resolveCompat()
		}
		if err == nil {
			c.in.envFiles = append(deepSpeedEnvFiles(getenv), c.in.envFiles...)
			err = c.resolveInputs(environ)
			c.Env.Warnings = append(c.Env.Warnings, warns...)
		}
		if err == nil {
			err = c.resolveTimeout(getenv)
		}
		if err == nil {
			err = c.resolveTreeWidth(getenv)
		}
	}
	if err == nil {
		err = c.resolveTransport(getenv)
	}
	if err == nil {
		err = c.validate()
	}
	c.in = flagInputs{}
	return c, err
}

// resolveTransport picks the default transport: srun inside a Slurm
// allocation (SLURM_JOB_ID) whose nodes are the hosts (no -H or
// hostfile), except for --mpi=openmpi, whose mpirun reaches the agents
// over SSH; else agents on --port. --transport slurm needs an allocation.
func (c *Config) resolveTransport(getenv func(string) string) error {
	if err := srunTasks(getenv); err != nil && c.Mode != ModeDryRun {
		return err
	}
	t := &c.Transport
	// Asking to wait (--start-timeout), or pods that Kubernetes starts
	// late (mpi-operator's hostfile), waits the whole --start-timeout for
	// hosts where nothing answers, unless --unreachable-grace is given.
	if !c.in.given["unreachable-grace"] && (c.in.given["start-timeout"] || c.Place.Source == HostsMPIOperator) {
		t.UnreachableGrace = 0
	}
	inAlloc := getenv("SLURM_JOB_ID") != ""
	switch {
	case !c.in.given["transport"] && inAlloc && c.Place.Source == HostsSlurm && c.Mode != ModeOpenMPI:
		t.Kind = transport.Slurm
	case t.Kind != transport.Slurm:
	case !inAlloc:
		return fmt.Errorf("%w: --transport slurm: not inside a Slurm allocation (SLURM_JOB_ID is not set; run the launcher under salloc or sbatch)", ErrUsage)
	case c.Mode == ModeOpenMPI:
		return fmt.Errorf("%w: --transport slurm does not work with --mpi=openmpi (run Open MPI's mpirun itself: it starts its daemons with srun)", ErrUsage)
	case c.Place.Source == HostsLocal:
		return fmt.Errorf("%w: --transport slurm: no hosts (SLURM_JOB_NODELIST is not set, and no -H or hostfile)", ErrUsage)
	}
	return c.resolveAgentPath()
}

// srunTasks refuses a launcher that is one of several tasks of an srun
// step (`srun launcher ...` in a batch script, the habit srun-launched
// programs teach): every task would launch the whole job, each with its
// own agents, sixteen jobs on the same nodes and GPUs for sixteen tasks.
// srun sets SLURM_STEP_NUM_TASKS in a step's tasks only (a batch script
// and salloc's shell have none); a step of one task (`srun --pty bash`)
// runs one launcher and is fine.
func srunTasks(getenv func(string) string) error {
	n, err := strconv.Atoi(getenv("SLURM_STEP_NUM_TASKS"))
	if err != nil || n <= 1 {
		return nil
	}
	step := getenv("SLURM_JOB_ID") + "." + getenv("SLURM_STEP_ID")
	return fmt.Errorf("%w: this launcher is task %s of %d of srun step %s: every task would launch the whole job; run the launcher once, "+
		"in the batch script or salloc's shell without srun (it starts one agent per node itself), or under srun --ntasks=1",
		ErrUsage, cmp.Or(getenv("SLURM_PROCID"), "?"), n, step)
}

func (c *Config) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrUsage}, a...)...)
	}
	switch {
	case c.Place.MapBy != "slot" && c.Place.MapBy != "node":
		return bad("-map-by %q is not supported (use slot or node)", c.Place.MapBy)
	case !slices.Contains([]string{"none", "numa", "core", "hwthread", "socket"}, c.Place.BindTo):
		return bad("-bind-to %q is not supported (use none, numa, core, hwthread or socket)", c.Place.BindTo)
	case c.Place.GPUsPer < 1:
		return bad("--gpus-per-rank %d: must be at least 1", c.Place.GPUsPer)
	case c.Control.KillGrace < 0:
		return bad("--kill-grace must not be negative")
	case c.Control.MaxRestarts < 0:
		return bad("--max-restarts %d: must not be negative", c.Control.MaxRestarts)
	case c.Place.Spares > 0 && (c.Place.Source == HostsLocal || c.Place.PerSocket > 0):
		return bad("--spares needs a host list (-H, a hostfile or an allocation) and slots given with it (not -map-by ppr:N:socket)")
	case c.Place.Spares > 0 && c.Place.Spares >= len(c.Place.Hosts):
		return bad("--spares %d: only %d hosts given; at least one must run ranks", c.Place.Spares, len(c.Place.Hosts))
	case c.Control.RunID != "" && !validRunID(c.Control.RunID):
		return bad("--run-id %q: use letters, digits, '.', '_' and '-'", c.Control.RunID)
	case c.Out.LogFormat != "console" && c.Out.LogFormat != "json":
		return bad("--log-format %q: use console or json", c.Out.LogFormat)
	case c.in.mpi != "auto" && c.in.mpi != "pmi" && c.in.mpi != "none" && c.in.mpi != "openmpi":
		return bad("--mpi %q: use auto, pmi, none or openmpi (horovodrun's --mpi, followed by an option, is --mpi auto)", c.in.mpi)
	case c.in.kindErr != nil:
		return bad("--transport %q: %v", c.in.transport, c.in.kindErr)
	case c.Transport.Port < 1 || c.Transport.Port > 65535:
		return bad("--port %d out of range", c.Transport.Port)
	case c.Transport.TreeWidthGiven && c.Transport.TreeWidth > 0 && c.Transport.Kind == transport.SSH:
		return bad("--tree-width %d: relays log in to their children's agents, and --transport ssh starts every agent itself through the system ssh (give --tree-width 0 or auto, or --transport agent)", c.Transport.TreeWidth)
	}
	c.Env.PMI = c.in.mpi != "none"
	c.Env.MPIAuto = c.in.mpi == "auto"
	if err := c.Health.validate(c.Transport.StartTimeout); err != nil {
		return err
	}
	return c.Bench.validate()
}

func (b *Bench) validate() error {
	if b.MetricScope != "rank" && b.MetricScope != "global" {
		return fmt.Errorf("%w: --metric-scope %q: use rank or global", ErrUsage, b.MetricScope)
	}
	if b.Straggler < 0 || b.Straggler >= 1 {
		return fmt.Errorf("%w: --straggler-threshold %v: want a fraction in [0,1)", ErrUsage, b.Straggler)
	}
	return nil
}

// PlanOptions are the placement options of plan.Ranks. The implicit
// local host takes any -np (as torchrun's --nproc_per_node); its slots
// only set the default.
func (p Placement) PlanOptions() plan.Options {
	return plan.Options{MapBy: p.MapBy, RankBy: p.RankBy, NPerNode: p.NPerNode, Oversubscribe: p.Oversubscribe || p.Source == HostsLocal}
}

// validRunID accepts what a path element and a log field can carry.
func validRunID(s string) bool {
	if len(s) > 128 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
