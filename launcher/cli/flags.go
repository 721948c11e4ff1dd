package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/textx"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// flagInputs are flag values that need the environment or files to mean
// something (hosts, -x, env files) or whose errors Parse words itself;
// Parse resolves them into Config and clears them.
type flagInputs struct {
	hostLists, hostfiles []string
	exports              []envArg // -x and -genv, in command-line order
	envFiles             []string
	forward              []forwardArg // -genvall, -genvnone, -genvlist
	stdin, outputFrom    string
	mpi                  string
	transport            string          // --transport, as given
	kindErr              error           // why it names no transport
	given                map[string]bool // the flags the command line set
	compat               compatInputs    // other launchers' spellings (compat.go)
}

// flagSet registers every flag on the Config it fills, group by group.
// Usage (main.go) is the help text; keep the two true to each other.
func (c *Config) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("launcher", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Place.register(fs, &c.in)
	c.Env.register(fs, &c.in)
	c.Out.register(fs, &c.in)
	registerTransport(fs, &c.Transport, &c.in)
	c.Network.register(fs)
	c.Control.register(fs)
	c.Health.register(fs)
	c.Bench.register(fs)
	c.Mode.register(fs)
	c.registerCompat(fs)
	fs.Bool("allow-run-as-root", false, "accepted for mpirun compatibility (gangway runs as root without it)")
	return fs
}

func (p *Placement) register(fs *flag.FlagSet, in *flagInputs) {
	for _, n := range []string{"np", "n"} {
		fs.IntVar(&p.NP, n, 0, "number of ranks (default: all slots)")
	}
	for _, n := range []string{"H", "host"} {
		fs.Var(listFlag{&in.hostLists}, n, "hosts: [user@]host[:slots[:port]],..., host may be a range: gpu[01-04]:8 (repeatable)")
	}
	for _, n := range []string{"hostfile", "machinefile", "f"} {
		fs.Var(listFlag{&in.hostfiles}, n, "hostfile (Open MPI, MPICH or PBS format)")
	}
	fs.StringVar(&p.BindTo, "bind-to", "none", "CPU binding: none, numa (the CPUs of the rank's GPU's NUMA node), core or hwthread (one CPU per rank), or socket")
	fs.StringVar(&p.MapBy, "map-by", "slot", "rank placement: slot (fill each host), node (round robin), ppr:N:node or ppr:N:socket (N ranks per host or socket); :PE=n binds each rank to n CPUs")
	for _, n := range []string{"N", "npernode"} {
		fs.IntVar(&p.NPerNode, n, 0, "ranks per host")
	}
	fs.BoolVar(&p.Oversubscribe, "oversubscribe", false, "allow more ranks than slots")
	fs.IntVar(&p.Spares, "spares", 0, "the last N hosts of the list stand by, to take the place of a host left out (not reached at the start, unhealthy, lost, or blamed for a failure)")
	for _, n := range []string{"gpus-per-rank", "gpus-per-proc"} {
		fs.IntVar(&p.GPUsPer, n, 1, "GPUs given to each rank in CUDA_VISIBLE_DEVICES on hosts with GPUs")
	}
	fs.Func("gpus", "GPU indices to use on every host, e.g. 0,2", func(s string) (err error) {
		p.GPUs.All, err = plan.ParseGPUList(s)
		return err
	})
	fs.Func("include", "only these GPUs on these hosts: host:0,1@host2:2,3", func(s string) (err error) {
		p.GPUs.Include, err = plan.ParseHostGPUs(s)
		return err
	})
	fs.Func("exclude", "not these GPUs (or none of a host's, without a list): host:0@host2", func(s string) (err error) {
		p.GPUs.Exclude, err = plan.ParseHostGPUs(s)
		return err
	})
}

func (e *Environment) register(fs *flag.FlagSet, in *flagInputs) {
	fs.Var(envArgFlag{&in.exports, SrcX}, "x", "export NAME, NAME=VALUE or 'PREFIX*' to every rank (repeatable)")
	fs.Var(listFlag{&in.envFiles}, "env-file", "file of KEY=VALUE lines exported to every rank (repeatable)")
	registerForward(fs, in)
	for _, n := range []string{"mca", "gmca"} {
		fs.Var(mcaFlag{&e.MCA}, n, "KEY VALUE: set OMPI_MCA_KEY=VALUE in every rank")
	}
	for _, n := range []string{"wdir", "wd"} {
		fs.StringVar(&e.Dir, n, "", "working directory of every rank (default: the launcher's)")
	}
	for _, n := range []string{"usize", "universe-size"} {
		fs.Func(n, "universe size PMI tells ranks: N, SYSTEM (the slots of the hosts that run ranks) or INFINITE (default: unknown, -1)", func(s string) error {
			switch strings.ToUpper(s) {
			case "SYSTEM":
				e.Universe = UniverseSystem
			case "INFINITE":
				e.Universe = UniverseInfinite
			default:
				n, err := strconv.Atoi(s)
				if err != nil || n < 1 || n > plan.MaxRanks {
					return fmt.Errorf("want a size from 1 to %d, SYSTEM or INFINITE, got %q", plan.MaxRanks, s)
				}
				e.Universe = n
			}
			return nil
		})
	}
	fs.Func("tf-config", "give every rank TF_CONFIG as TFJob writes it (TensorFlow's MultiWorkerMirroredStrategy): every rank a worker on its host's data address, port PORT plus its local rank (TFJob's default 2222)", func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("want a port number, got %q", s)
		}
		e.TFPort = n
		return nil
	})
	fs.StringVar(&in.mpi, "mpi", "auto", "MPI bootstrap: auto (serve PMI to every rank; an Open MPI program runs as openmpi), pmi, none, or openmpi (run Open MPI's mpirun over the agents)")
}

func (o *Output) register(fs *flag.FlagSet, in *flagInputs) {
	fs.Var(tagsFlag{&o.Tags}, "tags", "rank tags on console lines: auto (rank on a terminal, none otherwise), none, rank ([R] ) or mpirun ([1,R]<stdout>:)")
	for _, n := range []string{"l", "prepend-rank"} {
		fs.Var(tagFlag{&o.Tags, plan.TagRank}, n, "tag lines [RANK]  as Hydra's -prepend-rank does (--tags rank)")
	}
	fs.Var(tagFlag{&o.Tags, plan.TagMpirun}, "tag-output", "tag lines as mpirun does: [1,RANK]<stdout>: (--tags mpirun)")
	fs.BoolVar(&o.Timestamp, "timestamp-output", false, "prefix every line with the time it arrived")
	fs.StringVar(&o.Dir, "output-filename", "", "also write DIR/rank.R/stdout and stderr")
	fs.StringVar(&in.outputFrom, "output-from", "", "show only these ranks on the console, e.g. 0,4-7 (files keep all)")
	fs.StringVar(&in.stdin, "stdin", "0", "rank that receives the launcher's stdin, or none")
	fs.BoolVar(&o.ReportBindings, "report-bindings", false, "print each rank's CPU binding")
	o.ProgressAuto = true
	fs.BoolFunc("progress", "print a throughput status line every few seconds (default: when stderr is a terminal)", func(s string) error {
		on, err := strconv.ParseBool(s)
		o.Progress, o.ProgressAuto = on, false
		return err
	})
	o.ProgressEvery = 5 * time.Second
	fs.Var(durationSecs{&o.ProgressEvery}, "progress-every", "seconds between --progress lines")
	fs.BoolVar(&o.JSON, "json", false, "with --inspect: JSON instead of a table")
	fs.BoolVar(&o.Verbose, "v", false, "verbose logging")
	fs.StringVar(&o.LogFormat, "log-format", "console", "log format: console or json")
}

// registerTransport registers --transport and its options; a --transport
// that names no transport is reported by validate, as a usage error.
func registerTransport(fs *flag.FlagSet, t *transport.Options, in *flagInputs) {
	t.Kind, in.transport = transport.Agent, string(transport.Agent)
	fs.Func("transport", "how to reach hosts: agent (an agent listening on --port), ssh (start 'agent --stdio' through the system ssh) or slurm (start 'agent --srun' on every node with one srun step); default slurm inside a Slurm allocation when no hosts are given, else agent", func(s string) error {
		in.transport = s
		t.Kind, in.kindErr = transport.ParseKind(s)
		return nil
	})
	for _, n := range []string{"p", "port"} {
		fs.IntVar(&t.Port, n, DefaultPort, "agent SSH port (per-host ports: host:slots:port or port= in a hostfile)")
	}
	fs.StringVar(&t.AgentPath, "agent-path", agentName, "path of the agent binary on the hosts, for --transport ssh (default: agent, in the remote PATH) and slurm (default: the agent beside this launcher, else in PATH)")
	t.SSHCommand = "ssh"
	fs.Var(sshCommandFlag{&t.SSHCommand}, "ssh", "ssh command line for --transport ssh, split into words as sh would with no shell run: quotes and backslashes work, $VAR and ~ are not expanded (e.g. \"ssh -F /dev/null -o 'UserKnownHostsFile=/tmp/my hosts'\")")
	fs.StringVar(&t.Identity, "i", "", "SSH identity file, and its user certificate FILE-cert.pub if there (default: SSH_AUTH_SOCK, then ~/.ssh/id_ed25519, id_ecdsa, id_rsa)")
	fs.StringVar(&t.SSHConfig, "F", "", "ssh client configuration read instead of ~/.ssh/config and /etc/ssh/ssh_config (HostName, Port, User, IdentityFile, ProxyJump...), as ssh -F; none reads none")
	fs.StringVar(&t.KnownHosts, "known-hosts", "", "known_hosts file (default ~/.ssh/known_hosts)")
	fs.BoolVar(&t.AcceptNewHosts, "accept-new-host-keys", false, "trust and record host keys seen for the first time")
	t.StartTimeout = DefaultStartTimeout
	fs.Var(durationSecs{&t.StartTimeout}, "start-timeout", "how long to wait for every host's agent (seconds or duration)")
	t.UnreachableGrace = DefaultUnreachableGrace
	fs.Var(durationSecs{&t.UnreachableGrace}, "unreachable-grace", "once every other host is ready, how long to wait for hosts refusing connections (seconds or duration; 0: the whole -start-timeout; default 10s, off when -start-timeout is given or under mpi-operator)")
	t.TreeWidth = transport.TreeAuto
	fs.Var(treeWidthFlag{&t.TreeWidth}, "tree-width", "agents relay for each other in a tree of width K: the launcher reaches K hosts, each of them K more... (auto: flat below 256 hosts, else 32; 0: flat; 1: a chain; default $GANGWAY_TREE_WIDTH, else auto; --transport agent or slurm)")
}

// treeWidthFlag is --tree-width: auto, 0 (flat) or a width (1 chains the
// hosts, each the relay of the next: the deepest tree, for tests).
type treeWidthFlag struct{ w *int }

func (f treeWidthFlag) String() string {
	if f.w == nil || *f.w == transport.TreeAuto {
		return "auto"
	}
	return strconv.Itoa(*f.w)
}

func (f treeWidthFlag) Set(s string) error {
	if s == "auto" {
		*f.w = transport.TreeAuto
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > wire.MaxLinks {
		return fmt.Errorf("want auto, 0 (flat) or a width from 1 to %d, got %q", wire.MaxLinks, s)
	}
	*f.w = n
	return nil
}

func (n *Network) register(fs *flag.FlagSet) {
	fs.StringVar(&n.Interface, "network-interface", "", "force the data interface(s) NAME[,NAME] on every host")
	fs.BoolVar(&n.Preflight, "preflight", true, "before starting, check that every host reaches every other host's agent (multi-host jobs)")
	fs.Var(dropCachesFlag{&n.DropCaches}, "drop-caches", "sync and drop page caches on every host first (=1|2|3, default 3)")
	fs.BoolVar(&n.DropCachesBestEffort, "drop-caches-best-effort", false, "go on when a host cannot drop its caches")
	fs.Var(selftestFlag{&n.Selftest}, "selftest", "before starting, measure the bandwidth between pairs of hosts and name slow ones (=strict: stop the job when one is slow)")
}

func (c *Control) register(fs *flag.FlagSet) {
	fs.Var(durationSecs{&c.Timeout}, "timeout", "stop the job after SECONDS (or a duration such as 10m) and exit 124 (default: $MPIEXEC_TIMEOUT)")
	fs.DurationVar(&c.KillGrace, "kill-grace", DefaultKillGrace, "time between SIGTERM and SIGKILL when stopping ranks")
	fs.IntVar(&c.MaxRestarts, "max-restarts", 0, "restart the whole gang up to N times after a rank failure or a lost agent (never after a signal, --timeout or Slurm ending the job)")
	c.RestartBackoff = time.Second
	fs.Var(durationSecs{&c.RestartBackoff}, "restart-backoff", "wait this long (seconds or a duration) before each restart")
	fs.StringVar(&c.RunID, "run-id", "", "TORCHELASTIC_RUN_ID of every attempt (default: a random id)")
	fs.Var(durationSecs{&c.HangTimeout}, "hang-timeout", "when no rank printed anything for SECONDS (or a duration), collect every rank's stacks and stop the job (exit 124)")
}

func (b *Bench) register(fs *flag.FlagSet) {
	fs.Var(listFlag{&b.Metrics}, "metric", "NAME=REGEX: extra throughput recogniser with a named group 'value' (repeatable)")
	fs.StringVar(&b.MetricScope, "metric-scope", "rank", "scope of --metric values: rank (summed) or global")
	fs.IntVar(&b.WarmupSteps, "warmup-steps", -1, "samples per rank to skip as warm-up (default: the tool's own, else 10%)")
	fs.Float64Var(&b.Straggler, "straggler-threshold", 0.05, "flag ranks this fraction below the median")
	fs.Float64Var(&b.BaselineIPS, "baseline-ips", 0, "single-GPU throughput, for scaling efficiency")
	fs.StringVar(&b.ReportFile, "report", "", "write the throughput report as JSON to FILE")
	fs.StringVar(&b.PlotFile, "plot", "", "draw per-rank throughput (bars by rank beside the series over time) to FILE.png")
	fs.BoolVar(&b.NoSummary, "no-summary", false, "do not print the throughput summary")
}

func (m *Mode) register(fs *flag.FlagSet) {
	fs.Var(modeFlag{m, ModeDryRun}, "dry-run", "print the placement and every rank's environment, start nothing")
	fs.Var(modeFlag{m, ModeInspect}, "inspect", "print every host's facts and the environment the launcher would set, then exit")
	fs.Var(modeFlag{m, ModeAnalyze}, "analyze", "analyse saved logs (the arguments) instead of running a job")
	fs.Var(modeFlag{m, ModeVersion}, "version", "print the version and exit")
	for _, n := range []string{"h", "help"} {
		fs.Var(modeFlag{m, ModeHelp}, n, "show help")
	}
}

// modeFlag is a boolean flag that selects a mode; of several, the highest
// mode wins, whatever their order.
type modeFlag struct {
	m    *Mode
	mode Mode
}

func (f modeFlag) IsBoolFlag() bool { return true }
func (f modeFlag) String() string {
	if f.m != nil && *f.m == f.mode {
		return "true"
	}
	return "false"
}
func (f modeFlag) Set(s string) error {
	on, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("invalid boolean value %q", s)
	}
	if on {
		*f.m = max(*f.m, f.mode)
	}
	return nil
}

// tagsFlag is --tags auto|none|rank|mpirun.
type tagsFlag struct{ v *plan.TagStyle }

func (f tagsFlag) String() string {
	if f.v == nil {
		return plan.TagAuto.String()
	}
	return f.v.String()
}
func (f tagsFlag) Set(s string) error {
	t, err := plan.ParseTagStyle(s)
	if err != nil {
		return err
	}
	*f.v = t
	return nil
}

// tagFlag is a boolean spelling of one tag style (-l, --tag-output):
// true selects it, false selects no tags. Of several tag flags the last
// one wins.
type tagFlag struct {
	v     *plan.TagStyle
	style plan.TagStyle
}

func (f tagFlag) IsBoolFlag() bool { return true }
func (f tagFlag) String() string {
	if f.v != nil && *f.v == f.style {
		return "true"
	}
	return "false"
}
func (f tagFlag) Set(s string) error {
	on, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("invalid boolean value %q", s)
	}
	*f.v = plan.TagNone
	if on {
		*f.v = f.style
	}
	return nil
}

type listFlag struct{ v *[]string }

func (l listFlag) String() string {
	if l.v == nil {
		return ""
	}
	return strings.Join(*l.v, ",")
}
func (l listFlag) Set(s string) error { *l.v = append(*l.v, s); return nil }

// mcaFlag collects "-mca KEY VALUE" pairs; splitArgs joins the two words
// as KEY=VALUE.
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

// durationSecs takes seconds (mpirun's --timeout) or a Go duration.
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

// dropCachesFlag is --drop-caches[=1|2|3]; given alone it means 3.
type dropCachesFlag struct{ v *int }

func (d dropCachesFlag) String() string {
	if d.v == nil {
		return "0"
	}
	return strconv.Itoa(*d.v)
}
func (d dropCachesFlag) IsBoolFlag() bool { return true }
func (d dropCachesFlag) Set(s string) error {
	switch s {
	case "true":
		*d.v = 3
	case "false":
		*d.v = 0
	case "1", "2", "3":
		*d.v = int(s[0] - '0')
	default:
		return fmt.Errorf("want 1, 2 or 3, got %q", s)
	}
	return nil
}

// selftestFlag is --selftest[=report|strict|false]; given alone it
// means report.
type selftestFlag struct{ v *string }

func (f selftestFlag) String() string {
	if f.v == nil || *f.v == SelftestOff {
		return "false"
	}
	return *f.v
}
func (f selftestFlag) IsBoolFlag() bool { return true }
func (f selftestFlag) Set(s string) error {
	switch s {
	case "true", SelftestReport:
		*f.v = SelftestReport
	case "false", "off":
		*f.v = SelftestOff
	case SelftestStrict:
		*f.v = SelftestStrict
	default:
		return fmt.Errorf("want report, strict or false, got %q", s)
	}
	return nil
}

// sshCommandFlag is --ssh: a command line whose quoting must split (see
// textx.SplitShell) into at least one word.
type sshCommandFlag struct{ v *string }

func (f sshCommandFlag) String() string {
	if f.v == nil {
		return ""
	}
	return *f.v
}

func (f sshCommandFlag) Set(s string) error {
	words, err := textx.SplitShell(s)
	if err != nil {
		return err
	}
	if len(words) == 0 {
		return errors.New("empty command")
	}
	*f.v = s
	return nil
}

// twoWordFlags take two words (mpirun's -mca KEY VALUE).
var twoWordFlags = map[string]bool{"mca": true, "gmca": true, "genv": true, "env": true}

// splitArgs finds where the launcher's options end and the program
// begins, and rewrites "-mca KEY VALUE" into "-mca KEY=VALUE". Other
// launchers' options gangway does not register (foreignFlags) are taken
// out of opts here: accepted, with the warnings returned, or refused.
func splitArgs(fs *flag.FlagSet, args []string) (opts, prog, warns []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return opts, args[i+1:], warns, nil
		}
		if len(a) < 2 || a[0] != '-' {
			return opts, args[i:], warns, mpmd(args[i:])
		}
		name := strings.TrimLeft(a, "-")
		name, val, hasVal := strings.Cut(name, "=")
		if twoWordFlags[name] && !hasVal {
			if i+2 >= len(args) {
				return nil, nil, nil, fmt.Errorf("%w: %s needs KEY and VALUE", ErrUsage, a)
			}
			opts = append(opts, "-"+name+"="+args[i+1]+"="+args[i+2])
			i += 2
			continue
		}
		// horovodrun's --mpi is a switch: followed by an option, it is
		// --mpi auto.
		if name == "mpi" && !hasVal && (i+1 >= len(args) || strings.HasPrefix(args[i+1], "-")) {
			opts = append(opts, "-mpi=auto") // horovodrun's --mpi
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			skip, more, warn, ok, err := foreignArg(args, i, name, val, hasVal)
			if err != nil {
				return nil, nil, nil, err
			}
			if ok {
				if warn != "" {
					warns = append(warns, warn)
				}
				opts = append(opts, more...)
				i += skip
				continue
			}
			return nil, nil, nil, unknownOption(fs, a, name)
		}
		opts = append(opts, a)
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
			continue
		}
		if !hasVal {
			if i+1 >= len(args) {
				return nil, nil, nil, fmt.Errorf("%w: %s needs a value", ErrUsage, a)
			}
			i++
			opts = append(opts, args[i])
		}
	}
	return opts, nil, warns, nil
}

// mpmdOptions are the options that, after a ":" among PROGRAM's words,
// mark mpirun's and Hydra's MPMD form: PROG ARGS : -n N PROG2 ARGS.
var mpmdOptions = []string{"-n", "-np", "--np", "--n", "-c", "-N", "-H", "-host", "--host", "-hosts", "-env", "-genv", "-wdir", "--wdir", "-x"}

// mpmd refuses PROGRAM words in mpirun's and Hydra's MPMD form, which
// would otherwise run the first program with the rest as its arguments.
// A program that takes such words can follow "--".
func mpmd(prog []string) error {
	for i := 0; i+1 < len(prog); i++ {
		if prog[i] == ":" && slices.Contains(mpmdOptions, prog[i+1]) {
			return fmt.Errorf("%w: %q ... : %s ... is mpirun's and Hydra's form for several programs in one job (MPMD), which gangway does not run: one program per job (a program that takes these words goes after --)", ErrUsage, prog[0], prog[i+1])
		}
	}
	return nil
}

// unknownOption is the error for an option no launcher gangway knows
// has. A near flag is offered only when it is likely the one meant: for
// a one-letter name only the same letter in another case.
func unknownOption(fs *flag.FlagSet, a, name string) error {
	near := textx.Suggest(name, flagNames(fs))
	if len(name) == 1 && !strings.EqualFold(near, name) {
		near = ""
	}
	if near != "" {
		return fmt.Errorf("%w: unknown option %s: did you mean -%s? (see launcher -h)", ErrUsage, a, near)
	}
	return fmt.Errorf("%w: unknown option %s (see launcher -h)", ErrUsage, a)
}

func flagNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}
