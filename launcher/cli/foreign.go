package cli

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// foreignFlag is another launcher's option that gangway does not register
// as a flag of its own: one whose meaning gangway already delivers
// (accepted silently), one it does not use (accepted with a warning that
// says why), or one it refuses with a message naming its own equivalent.
// The -h text does not list them; README's "Coming from another launcher"
// does.
type foreignFlag struct {
	from  string   // whose option it is, for messages: "torchrun's", "Hydra's"...
	words int      // values after it: 0, 1 or 2
	allow []string // with words 1: the values accepted (nil: any), in lower case
	// refuse, when set, refuses the option (or a value not in allow)
	// with this explanation, which names gangway's equivalent.
	refuse string
	// rewrite, when set, takes the option as gangway's own options: it
	// returns them for the option's values, or why a value is refused.
	rewrite func(vals []string) ([]string, error)
	// warn, when set, is printed before the job: the option is accepted
	// and not used.
	warn string
}

// foreignFlags are the other launchers' options gangway knows without
// taking them as its own flags, by every spelling (without dashes). A
// registered flag of the same name wins: splitArgs reads this table only
// for names the flag set does not know.
var foreignFlags = func() map[string]foreignFlag {
	m := map[string]foreignFlag{}
	add := func(f foreignFlag, names ...string) {
		for _, n := range names {
			m[n] = f
		}
	}
	// torchrun
	add(foreignFlag{from: "torchrun's and DeepSpeed's", words: 1, refuse: "gangway starts every host's ranks from one command on one machine: run it once, without --node-rank (the hosts come from -H, a hostfile or the Slurm/PBS allocation)"},
		"node-rank", "node_rank")
	add(foreignFlag{from: "torchrun's", words: 1, allow: []string{"c10d", "static"}, refuse: "gangway is the rendezvous (it gives every rank MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE): c10d and static are accepted, other backends are not; drop --rdzv-backend"},
		"rdzv-backend", "rdzv_backend")
	add(foreignFlag{from: "torchrun's", words: 1, warn: "--rdzv-endpoint is not used: gangway is the rendezvous; MASTER_ADDR and MASTER_PORT are rank 0's data address and a port free there (choose them with --master-addr and --master-port)"},
		"rdzv-endpoint", "rdzv_endpoint")
	add(foreignFlag{from: "torchrun's", words: 1, refuse: "gangway's rendezvous has no options: the wait for the hosts is --start-timeout, restarts are --max-restarts"},
		"rdzv-conf", "rdzv_conf")
	add(foreignFlag{from: "torchrun's", words: 0}, "no-python", "no_python") // PROGRAM always runs as given
	add(foreignFlag{from: "torchrun's", words: 1, warn: "--monitor-interval is not used: the agents report a rank's exit as it happens"},
		"monitor-interval", "monitor_interval")
	add(foreignFlag{from: "torchrun's", words: 1}, "tee") // the console shows every rank's lines; --log-dir writes them too
	add(foreignFlag{from: "torchrun's", words: 1, refuse: "gangway always shows rank output on the console: --output-filename DIR (--log-dir) also writes DIR/rank.R/stdout and stderr, and --output-from RANKS limits the console to some ranks"},
		"redirects", "r")
	add(foreignFlag{from: "torchrun's", words: 1, refuse: "the hosts' addresses are their data addresses, chosen per host (see --network-interface); MASTER_ADDR is --master-addr"},
		"local-addr", "local_addr")
	add(foreignFlag{from: "torchrun's", words: 1}, "t")                                  // --tee
	add(foreignFlag{from: "torchrun's", words: 1}, "start-method", "start_method")       // every rank is a process of its own
	add(foreignFlag{from: "torch.distributed.launch's", words: 0}, "use-env", "use_env") // LOCAL_RANK is in every rank's environment
	add(foreignFlag{from: "torchrun's", words: 1, refuse: "the console can show some ranks only: --output-from RANKS (ranks of the job, not local ranks)"},
		"local-ranks-filter", "local_ranks_filter")
	add(foreignFlag{from: "torchrun's", words: 1, refuse: "per-rank files are --output-filename DIR"}, "logs-specs", "logs_specs")
	add(foreignFlag{from: "torchrun's", words: 1, refuse: "-bind-to numa binds each rank to its GPU's NUMA node; -bind-to socket, core, or -map-by slot:PE=N bind otherwise"},
		"numa-binding", "numa_binding")
	add(foreignFlag{from: "torchrun's", words: 1, refuse: "every rank's role is ROLE_NAME=default"}, "role")
	// Hydra (MPICH's mpiexec) and Intel MPI. Their environment options
	// (-genv, -genvall, ...) are gangway's own flags (flags.go).
	add(foreignFlag{from: "Hydra's", words: 1, refuse: "per-rank files are --output-filename DIR (DIR/rank.R/stdout and stderr)"},
		"outfile-pattern", "errfile-pattern", "outfile", "errfile")
	add(foreignFlag{from: "Hydra's", words: 1, refuse: "gangway runs one program per job (no MPMD); run one launcher per program"}, "configfile")
	add(foreignFlag{from: "Hydra's", words: 1, allow: []string{"slurm", "pbs"}, refuse: "gangway reads the Slurm and PBS allocations itself when no -H or hostfile is given"}, "rmk")
	add(foreignFlag{from: "Hydra's", words: 1, refuse: "the ssh command for --transport ssh is --ssh COMMAND"}, "launcher-exec", "bootstrap-exec")
	add(foreignFlag{from: "Hydra's", words: 1, refuse: "rank tags are -l ([R] ), --tag-output ([1,R]<stdout>:) or --tags none"}, "prepend-pattern")
	add(foreignFlag{from: "Hydra's", words: 1, refuse: "the working directory of every rank is -wdir DIR"}, "gwdir")
	add(foreignFlag{from: "Hydra's", words: 1, refuse: "PROGRAM is found in the ranks' PATH (-x PATH=...)"}, "path", "gpath")
	add(foreignFlag{from: "Intel MPI's", words: 1, refuse: "the rank that gets the launcher's stdin is --stdin RANK|none"}, "s")
	add(foreignFlag{from: "Intel MPI's", words: 1, refuse: "N consecutive ranks per host are -N N (with -map-by slot)"}, "grr")
	add(foreignFlag{from: "Intel MPI's", words: 0, refuse: "this machine alone is --standalone"}, "localonly")
	add(foreignFlag{from: "Intel MPI's", words: 1, refuse: "every host runs the same PROGRAM"}, "hostos")
	add(foreignFlag{from: "Intel MPI's", words: 1, refuse: "each rank's CUDA_VISIBLE_DEVICES holds its GPUs: --gpus-per-rank N, --gpus LIST"}, "gpu-bind")
	add(foreignFlag{from: "Intel MPI's", words: 1, refuse: "-bind-to numa binds each rank to its GPU's NUMA node"}, "membind")
	add(foreignFlag{from: "Intel MPI's", words: 0, refuse: "set the tool's variables with -x (LD_PRELOAD, VT_*...)"}, "trace", "check_mpi")
	add(foreignFlag{from: "Intel MPI's", words: 0, refuse: "a hung job's stacks: --hang-timeout SECONDS, or SIGUSR1 to the launcher"}, "gdb")
	add(foreignFlag{from: "Cray PALS mpiexec's", words: 1, refuse: "use -bind-to none|numa|core|hwthread|socket, or -map-by slot:PE=N"}, "cpu-bind", "depth")
	add(foreignFlag{from: "Hydra's", words: 0}, "ordered-output")      // a rank's lines are never split or mixed
	add(foreignFlag{from: "Hydra's", words: 0}, "print-all-exitcodes") // the failure report names every failed rank
	// horovodrun
	add(foreignFlag{from: "horovodrun's", words: 0, refuse: "gangway serves no Horovod Gloo rendezvous: drop --gloo and Horovod uses its MPI controller (every rank is served PMI; a Horovod built on Open MPI needs --mpi openmpi)"},
		"gloo")
	add(foreignFlag{from: "horovodrun's", words: 0}, "disable-cache") // gangway keeps no cache of host checks
	add(foreignFlag{from: "horovodrun's", words: 1, refuse: "gangway runs a fixed-size gang, restarted whole with --max-restarts"},
		"min-np", "max-np", "host-discovery-script", "slots", "elastic-timeout", "reset-limit", "blacklist-cooldown-range")
	for flag, k := range horovodKnobs {
		add(foreignFlag{from: "horovodrun's", words: k.words(), rewrite: k.rewrite}, flag)
	}
	add(foreignFlag{from: "horovodrun's", words: 0, rewrite: func([]string) ([]string, error) { return []string{"--timestamp-output"}, nil }},
		"prefix-output-with-timestamp", "prefix-timestamp")
	add(foreignFlag{from: "horovodrun's", words: 1, rewrite: func(v []string) ([]string, error) { return []string{"--network-interface", v[0]}, nil }}, "nics")
	add(foreignFlag{from: "horovodrun's", words: 1, refuse: "give the options on the command line"}, "config-file")
	add(foreignFlag{from: "horovodrun's", words: 0, refuse: "gangway starts the ranks through its agents, ssh or srun (--transport), not jsrun"}, "jsrun")
	add(foreignFlag{from: "horovodrun's", words: 1, refuse: "gangway starts the ranks through its agents, ssh or srun (--transport), not jsrun"}, "binding-args")
	add(foreignFlag{from: "horovodrun's", words: 1, refuse: "gangway runs no mpirun of its own unless --mpi openmpi; Open MPI's settings are -mca KEY VALUE"}, "mpi-args")
	add(foreignFlag{from: "horovodrun's", words: 0, refuse: "run python3 -c 'import horovod; print(horovod.__version__)' on a host, or launcher --inspect"}, "check-build", "cb")
	// Open MPI's mpirun
	add(foreignFlag{from: "mpirun's", words: 0, refuse: "the hosts are exactly -H, the hostfile or the allocation: leave this machine out of them"}, "nolocal")
	add(foreignFlag{from: "mpirun's", words: 1, refuse: "the agent binary on the hosts is --agent-path (with --transport ssh or slurm)"}, "launch-agent")
	add(foreignFlag{from: "mpirun's", words: 1, refuse: "give each parameter as -mca KEY VALUE"}, "am", "tune")
	add(foreignFlag{from: "mpirun's", words: 0, refuse: "the program must already be on every host"}, "preload-binary")
	add(foreignFlag{from: "mpirun's", words: 1, refuse: "files must already be on every host"}, "preload-files")
	add(foreignFlag{from: "mpirun's", words: 2, refuse: "gangway replaces Open MPI's runtime (PRRTE); the ranks' MCA parameters are -mca KEY VALUE"}, "prtemca", "pmca")
	add(foreignFlag{from: "mpirun's", words: 0, refuse: "--display-map prints the placement; --inspect prints every host's facts"}, "display-allocation", "display-devel-map")
	add(foreignFlag{from: "mpirun's", words: 0, refuse: "the launcher's output is plain text (--dry-run's placement table is stable for scripts)"}, "xml")
	add(foreignFlag{from: "mpirun's", words: 0, refuse: "the ranks' PIDs are in -v's logs"}, "report-pid")
	add(foreignFlag{from: "mpirun's", words: 0, refuse: "use -bind-to core"}, "bind-to-core")
	add(foreignFlag{from: "mpirun's", words: 0, refuse: "use -bind-to socket"}, "bind-to-socket")
	add(foreignFlag{from: "mpirun's", words: 0, refuse: "use -bind-to none"}, "bind-to-none")
	add(foreignFlag{from: "mpirun's", words: 1, refuse: "ranks are placed by -map-by and -rank-by; a rankfile is not read"}, "rankfile", "rf")
	add(foreignFlag{from: "mpirun's", words: 0, refuse: "a host's slots are -H host:N, the hostfile's or the allocation's; -bind-to hwthread binds one hardware thread per rank"}, "use-hwthread-cpus")
	add(foreignFlag{from: "mpirun's", words: 0, refuse: "gangway restarts the whole gang after a failure: --max-restarts N"}, "enable-recovery", "continuous", "with-ft")
	add(foreignFlag{from: "mpirun's", words: 0, refuse: "the launcher's own logs are -v"}, "debug", "d", "debug-daemons", "debug-devel")
	add(foreignFlag{from: "mpirun's", words: 1, refuse: "PROGRAM is found in the ranks' PATH (-x PATH=...)"}, "app")
	add(foreignFlag{from: "mpirun's", words: 0, refuse: "the launcher stops ranks with SIGTERM on SIGINT, SIGTERM or SIGHUP and collects their stacks on SIGUSR1; it forwards no other signal"}, "forward-signals")
	add(foreignFlag{from: "mpirun's", words: 1, refuse: "the hosts are -H or -hostfile"}, "default-hostfile", "add-host", "add-hostfile")
	add(foreignFlag{from: "mpirun's", words: 0}, "noprefix") // gangway has no default prefix
	add(foreignFlag{from: "mpirun's", words: 1, refuse: "gangway runs no Open MPI runtime to report on or connect to (--dry-run and --display-map print the placement)"},
		"report-uri", "output-proctable", "ompi-server")
	// DeepSpeed's launcher
	add(foreignFlag{from: "DeepSpeed's", words: 0}, "force_multi", "no_local_rank") // hosts are -H or the hostfile; LOCAL_RANK is in every rank's environment
	add(foreignFlag{from: "DeepSpeed's", words: 1, refuse: "gangway's transport takes no extra arguments: -mca KEY VALUE for Open MPI (--mpi openmpi), --ssh for ssh's"}, "launcher_args")
	add(foreignFlag{from: "DeepSpeed's", words: 0, refuse: "bind each rank to N CPUs with -map-by slot:PE=N, or to its GPU's NUMA node with -bind-to numa"}, "bind_cores_to_rank")
	add(foreignFlag{from: "DeepSpeed's", words: 1, refuse: "bind each rank to N CPUs with -map-by slot:PE=N, or to its GPU's NUMA node with -bind-to numa"}, "bind_core_list")
	add(foreignFlag{from: "DeepSpeed's", words: 0, refuse: "gangway runs a fixed-size gang, restarted whole with --max-restarts"}, "elastic_training")
	add(foreignFlag{from: "DeepSpeed's", words: 1, refuse: "gangway runs a fixed-size gang, restarted whole with --max-restarts"}, "min_elastic_nodes", "max_elastic_nodes")
	add(foreignFlag{from: "DeepSpeed's", words: 1, refuse: "run DeepSpeed's autotuner with DeepSpeed's own launcher"}, "autotuning")
	add(foreignFlag{from: "DeepSpeed's", words: 1, refuse: "the launcher's PID is $! of the shell that started it"}, "save_pid")
	add(foreignFlag{from: "DeepSpeed's", words: 1, refuse: "Slurm's options belong to salloc or sbatch; gangway runs inside the allocation"}, "comment", "account")
	add(foreignFlag{from: "DeepSpeed's", words: 1, refuse: "the ranks' environment is -x and --env-file"}, "venv_script")
	return m
}()

// horovodKnob is one of horovodrun's tuning options: it sets a Horovod
// variable in every rank's environment, as horovodrun's config_parser
// (set_env_from_args) does, so gangway takes it as -x NAME=VALUE.
type horovodKnob struct {
	env string
	// set is the value of an option without one ("1" or "0"); "" for an
	// option that takes a value of kind.
	set  string
	kind knobKind
}

type knobKind int

const (
	knobText  knobKind = iota // as given
	knobCount                 // a whole number >= 0 (horovodrun's type=int, validated >= 0)
	knobMB                    // a whole number of MB >= 0, set in bytes
	knobMS                    // a number >= 0 (type=float)
	knobFrac                  // a number in [0, 1]
	knobLevel                 // one of Horovod's log levels, any case
)

// horovodKnobs are horovodrun's tuning options by name. The intent of
// --log-without-timestamp is kept (HOROVOD_LOG_HIDE_TIME=1; horovodrun
// itself sets 0 for it).
var horovodKnobs = map[string]horovodKnob{
	"fusion-threshold-mb":               {env: "HOROVOD_FUSION_THRESHOLD", kind: knobMB},
	"cycle-time-ms":                     {env: "HOROVOD_CYCLE_TIME", kind: knobMS},
	"cache-capacity":                    {env: "HOROVOD_CACHE_CAPACITY", kind: knobCount},
	"hierarchical-allreduce":            {env: "HOROVOD_HIERARCHICAL_ALLREDUCE", set: "1"},
	"no-hierarchical-allreduce":         {env: "HOROVOD_HIERARCHICAL_ALLREDUCE", set: "0"},
	"hierarchical-allgather":            {env: "HOROVOD_HIERARCHICAL_ALLGATHER", set: "1"},
	"no-hierarchical-allgather":         {env: "HOROVOD_HIERARCHICAL_ALLGATHER", set: "0"},
	"autotune":                          {env: "HOROVOD_AUTOTUNE", set: "1"},
	"autotune-log-file":                 {env: "HOROVOD_AUTOTUNE_LOG"},
	"autotune-warmup-samples":           {env: "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", kind: knobCount},
	"autotune-steps-per-sample":         {env: "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", kind: knobCount},
	"autotune-bayes-opt-max-samples":    {env: "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", kind: knobCount},
	"autotune-gaussian-process-noise":   {env: "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", kind: knobFrac},
	"timeline-filename":                 {env: "HOROVOD_TIMELINE"},
	"timeline-mark-cycles":              {env: "HOROVOD_TIMELINE_MARK_CYCLES", set: "1"},
	"no-stall-check":                    {env: "HOROVOD_STALL_CHECK_DISABLE", set: "1"},
	"stall-check-warning-time-seconds":  {env: "HOROVOD_STALL_CHECK_TIME_SECONDS", kind: knobCount},
	"stall-check-shutdown-time-seconds": {env: "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", kind: knobCount},
	"mpi-threads-disable":               {env: "HOROVOD_MPI_THREADS_DISABLE", set: "1"},
	"num-nccl-streams":                  {env: "HOROVOD_NUM_NCCL_STREAMS", kind: knobCount},
	"thread-affinity":                   {env: "HOROVOD_THREAD_AFFINITY", kind: knobCount},
	"ccl-bgt-affinity":                  {env: "HOROVOD_CCL_BGT_AFFINITY", kind: knobCount},
	"gloo-timeout-seconds":              {env: "HOROVOD_GLOO_TIMEOUT_SECONDS", kind: knobCount},
	"log-level":                         {env: "HOROVOD_LOG_LEVEL", kind: knobLevel},
	"log-without-timestamp":             {env: "HOROVOD_LOG_HIDE_TIME", set: "1"},
	"log-hide-timestamp":                {env: "HOROVOD_LOG_HIDE_TIME", set: "1"},
	"log-with-timestamp":                {env: "HOROVOD_LOG_HIDE_TIME", set: "0"},
	"tcp":                               {env: "NCCL_IB_DISABLE", set: "1"}, // horovodrun's --tcp: only TCP, NCCL too
}

// horovodLogLevels are Horovod's log levels (config_parser.LOG_LEVELS).
var horovodLogLevels = []string{"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"}

func (k horovodKnob) words() int {
	if k.set != "" {
		return 0
	}
	return 1
}

// rewrite is the knob as -x NAME=VALUE, its value checked as horovodrun
// checks it.
func (k horovodKnob) rewrite(vals []string) ([]string, error) {
	v := k.set
	if v == "" {
		v = vals[0]
		bad := func(want string) error { return fmt.Errorf("%q: want %s (sets %s)", v, want, k.env) }
		switch k.kind {
		case knobCount, knobMB:
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || k.kind == knobMB && n > 1<<30 {
				return nil, bad("a whole number >= 0")
			}
			if k.kind == knobMB {
				v = strconv.Itoa(n << 20)
			}
		case knobMS, knobFrac:
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) || k.kind == knobFrac && f > 1 {
				if k.kind == knobFrac {
					return nil, bad("a number from 0 to 1")
				}
				return nil, bad("a number >= 0")
			}
		case knobLevel:
			i := slices.Index(horovodLogLevels, strings.ToUpper(v))
			if i < 0 {
				return nil, bad("one of " + strings.Join(horovodLogLevels, ", "))
			}
			v = horovodLogLevels[i]
		}
	}
	return []string{"-x", k.env + "=" + v}, nil
}

// foreignArg reads another launcher's option at args[i] (name without
// dashes, val after "=" when hasVal): the number of words it took after
// args[i], and a warning to print, or a usage error. ok is false when
// name is not another launcher's option gangway knows.
func foreignArg(args []string, i int, name, val string, hasVal bool) (skip int, opts []string, warn string, ok bool, err error) {
	f, ok := foreignFlags[name]
	if !ok {
		return 0, nil, "", false, nil
	}
	a := args[i]
	var vals []string
	switch {
	case hasVal:
		vals = []string{val}
	case f.words > 0:
		if i+f.words >= len(args) {
			return 0, nil, "", true, fmt.Errorf("%w: %s (%s option) needs %d value(s)", ErrUsage, a, f.from, f.words)
		}
		vals, skip = args[i+1:i+1+f.words], f.words
	}
	if f.refuse != "" && (f.allow == nil || len(vals) == 0 || !slices.Contains(f.allow, strings.ToLower(vals[0]))) {
		shown := a
		if len(vals) > 0 && f.allow != nil {
			shown += " " + vals[0]
		}
		return 0, nil, "", true, fmt.Errorf("%w: %s is %s option, not gangway's: %s", ErrUsage, shown, f.from, f.refuse)
	}
	if f.rewrite != nil {
		if hasVal && f.words == 0 {
			return 0, nil, "", true, fmt.Errorf("%w: %s (%s option) takes no value", ErrUsage, a, f.from)
		}
		if opts, err = f.rewrite(vals); err != nil {
			return 0, nil, "", true, fmt.Errorf("%w: %s (%s option): %w", ErrUsage, a, f.from, err)
		}
	}
	return skip, opts, f.warn, true, nil
}
