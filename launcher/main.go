package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"

	"go.uber.org/zap"

	"gangway/agent/wire"
	"gangway/bench"
	"gangway/hostfile"
)

// Usage is the --help text. Keep it true to the flags in config.go.
const Usage = `usage: launcher [options] PROGRAM [ARGS...]

Runs PROGRAM as a gang of ranks over the hosts' agents (or locally, in
process, when no hosts are given) with MPI, PyTorch and Horovod environments.

Examples:
  launcher -np 4 python3 train.py                     # 4 ranks on this machine
  launcher -np 16 -H hostA:8,hostB:8 python3 train.py # agents on port 22122
  launcher -hostfile hosts.txt -x NCCL_DEBUG=INFO ./all_reduce_perf -b 8 -e 128M
  launcher --dry-run -np 16 -H a:8,b:8 python3 train.py
  launcher --analyze run1.log run2.log                # throughput of saved logs

Hosts (default: this machine, -np defaulting to one rank per GPU, else per CPU):
  -H, -host LIST           [user@]host[:slots[:port]],...  (repeated hosts add slots)
  -hostfile, -machinefile, -f FILE
                           Open MPI (host slots=N [max_slots=M] [port=P]),
                           MPICH (host:N) or PBS nodefile; Slurm's
                           SLURM_JOB_NODELIST/SLURM_TASKS_PER_NODE and
                           $PBS_NODEFILE are read when no hosts are given
  -np, -n N                number of ranks (default: every slot)
  -N, -npernode N          ranks per host
  -map-by slot|node        fill each host (default) or deal round robin
  -oversubscribe           allow more ranks than slots
  -gpus-per-rank K         CUDA_VISIBLE_DEVICES gets K GPUs per rank (default 1)
  -gpus LIST               GPU indices to use on every host (0,2,...)
  -include HOST:GPUS@...   only these GPUs on these hosts (host:0,1@host2:2,3)
  -exclude HOST[:GPUS]@... not these GPUs (a host alone: none of its GPUs)
  -bind-to none|numa|core  CPU binding: none, the CPUs of the rank's GPU's
                           NUMA node, or one core per rank
  -report-bindings         print each rank's CPU binding

Network and node preparation:
  -network-interface NAME[,NAME]  force the data interface on every host
                           (default: per host, the interface its routes to
                           the other hosts use; sets NCCL_SOCKET_IFNAME,
                           GLOO_SOCKET_IFNAME, HOROVOD_GLOO_IFACE, NCCL_IB_HCA)
  -preflight=false         skip the check that every host reaches every other
                           host's agent before ranks start (multi-host jobs)
  -drop-caches[=1|2|3]     sync and drop page caches on every host first (3)
  -drop-caches-best-effort go on when a host may not drop its caches
  -inspect [-json]         print each host's facts and the environment the
                           launcher would set, then exit

Environment:
  -x NAME | NAME=VALUE | 'PREFIX*'   export to every rank (repeatable)
  -env-file FILE           KEY=VALUE lines exported to every rank
  -mca, -gmca KEY VALUE    OMPI_MCA_KEY=VALUE in every rank
  -wdir, -wd DIR           working directory of every rank
  -mpi auto|pmi|none|openmpi
                           auto/pmi: serve PMI-1/PMI-2 to MPICH-family ranks
                           (default auto); none: no PMI; openmpi: run Open
                           MPI's mpirun with the agents as its ssh transport
                           (launcher --rsh HOST CMD is that transport)

Output:
  -tag-output              mpirun-style tags [1,R]<stdout>: (default [R] )
  -timestamp-output        prefix lines with their arrival time
  -output-filename DIR     also write DIR/rank.R/stdout and stderr
  -output-from RANKS       console shows only these ranks (0,4-7)
  -stdin RANK|none         rank that gets the launcher's stdin (default 0)

Throughput (summary printed at the end when ranks print known formats):
  -metric NAME=REGEX       extra recogniser; named group 'value' (repeatable)
  -metric-scope rank|global  whether -metric values are summed over ranks
  -warmup-steps N          samples per rank left out as warm-up
  -straggler-threshold F   flag ranks F below the median (default 0.05)
  -baseline-ips X          single-GPU throughput, for scaling efficiency
  -report FILE.json        write the full report
  -plot FILE.png           draw per-rank throughput over time
  -no-summary              do not print the summary
  -analyze FILES...        analyse saved logs instead of running

Control:
  -timeout SECONDS         stop the job after this long, exit 124
  -kill-grace DURATION     SIGTERM to SIGKILL delay when stopping (default 5s)
  -start-timeout SECONDS   wait this long for every agent (default 60)
  -dry-run                 print the placement and environments, start nothing
  -transport agent|ssh     agents on -port (default), or 'agent --stdio'
                           started through the system ssh
  -p, -port N              agent port (default 22122)
  -agent-path PATH         agent binary on the hosts for -transport ssh
  -ssh COMMAND             ssh command line for -transport ssh (default ssh)
  -i FILE                  SSH identity (default: SSH_AUTH_SOCK, ~/.ssh/id_*)
  -known-hosts FILE        default ~/.ssh/known_hosts
  -accept-new-host-keys    record host keys seen for the first time
  -allow-run-as-root       accepted for mpirun compatibility
  -v                       verbose logs;  -log-format console|json
  -version, -h, -help

Options take one or two dashes. Everything after PROGRAM belongs to PROGRAM.

Exit status: the first failing rank's exit code (128+N for signal N, the
code given to MPI_Abort), 124 on -timeout, 128+N when the launcher was
stopped by signal N, 1 when hosts could not be reached or refused the job,
2 for usage errors, 255 when an agent was lost mid-job.
`

// Main is the launcher's whole life; cmd/launcher only wires.
func Main(ctx context.Context, args []string, d Deps, newLogger func(format string, verbose bool) *zap.Logger) int {
	if len(args) > 0 && args[0] == "--rsh" {
		if d.Log == nil {
			d.Log = newLogger("console", false)
		}
		return Rsh(ctx, args[1:], d)
	}
	cfg, err := Parse(args, os.Getenv, os.Environ())
	if cfg.Help {
		fmt.Fprint(d.Stdout, Usage)
		return 0
	}
	if cfg.Version {
		fmt.Fprintf(d.Stdout, "launcher %s (protocol %d)\n", d.Version, wire.Version)
		return 0
	}
	if err != nil {
		fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
		if errors.Is(err, ErrUsage) {
			return ExitUsage
		}
		return ExitSetup
	}
	if err := checkBench(cfg); err != nil {
		fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
		return ExitUsage
	}
	if d.Log == nil {
		d.Log = newLogger(cfg.LogFormat, cfg.Verbose)
		defer d.Log.Sync()
	}
	if d.Local == nil && d.NewLocal != nil {
		d.Local = d.NewLocal(d.Log)
	}
	if d.Remote == nil && !cfg.DryRun && !cfg.Analyze {
		remote, err := NewRemote(cfg, d.Log)
		if err != nil {
			fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
			return ExitSetup
		}
		d.Remote = remote
	}
	if cfg.Analyze {
		return analyze(ctx, cfg, d.Stdout, d.Stderr)
	}
	if cfg.Inspect {
		return Inspect(ctx, cfg, d)
	}
	if cfg.DryRun {
		if err := DryRun(d.Stdout, cfg); err != nil {
			fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
			return ExitUsage
		}
		return 0
	}
	if cfg.Dir == "" {
		cfg.Dir = d.Cwd
	}
	if cfg.MPI == "openmpi" {
		return RunOpenMPI(ctx, cfg, d)
	}
	return Run(ctx, cfg, d)
}

// DryRun prints the placement table and every rank's environment without
// touching the network. Format (stable; scripts read it):
//
//	# placement
//	RANK  HOST  LOCAL_RANK  LOCAL_SIZE  NODE  GPU
//	0     a     0           8           0     -
//	...
//	# environment rank 0 on a
//	KEY=VALUE (sorted)
//	...
//
// GPU is "-" because GPUs are only known from the hosts' agents; the
// host-specific values (MASTER_PORT, CUDA_VISIBLE_DEVICES, NCCL_*) that
// come from the hosts' facts are filled at launch.
func DryRun(w io.Writer, cfg Config) error {
	hosts := cfg.Hosts
	if cfg.HostSource == "local" {
		hosts = localDryRunHosts()
	}
	ranks, err := Plan(hosts, cfg.NP, cfg.planOptions())
	if err != nil {
		return err
	}
	hosts = usedHosts(hosts, ranks)
	he := make([]HostEnv, len(hosts))
	for i, h := range hosts {
		he[i] = HostEnv{Name: h.Name}
	}
	envs, err := Environ(ranks, he, JobEnv{JobID: "dry-run", MasterAddr: hosts[ranks[0].Host].Name, MasterPort: 29500, GPUsPer: cfg.GPUsPer, User: cfg.Env, MCA: cfg.MCA})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "# placement: %d ranks on %d hosts (map-by %s), command: %s\n", len(ranks), len(hosts), cfg.MapBy, strings.Join(cfg.Argv, " "))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tHOST\tLOCAL_RANK\tLOCAL_SIZE\tNODE\tGPU")
	for _, r := range ranks {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t-\n", r.Rank, hosts[r.Host].Name, r.LocalRank, r.LocalSize, r.NodeRank)
	}
	tw.Flush()
	for _, r := range ranks {
		fmt.Fprintf(w, "# environment rank %d on %s\n", r.Rank, hosts[r.Host].Name)
		for _, kv := range envs[r.Rank] {
			fmt.Fprintln(w, kv)
		}
	}
	return nil
}

func localDryRunHosts() []hostfile.Host {
	return []hostfile.Host{{Name: "localhost", Slots: runtime.NumCPU()}}
}

// benchOptions turns the throughput flags into bench options.
func benchOptions(cfg Config) (bench.Options, error) {
	opts := bench.DefaultOptions()
	opts.WarmupSteps = cfg.WarmupSteps
	opts.StragglerThreshold = cfg.Straggler
	opts.BaselineIPS = cfg.BaselineIPS
	scope, err := bench.ParseScope(cfg.MetricScope)
	if err != nil {
		return opts, err
	}
	for _, m := range cfg.Metrics {
		r, err := bench.ParseMetric(m, scope)
		if err != nil {
			return opts, err
		}
		opts.Metrics = append(opts.Metrics, r)
	}
	return opts, nil
}

// checkBench reports a bad --metric (or one named like a built-in) before
// any host is dialled; the collector it builds is thrown away.
func checkBench(cfg Config) error {
	opts, err := benchOptions(cfg)
	if err != nil {
		return err
	}
	opts.QueueSize = 1
	_, err = bench.NewCollector(opts)
	return err
}

func newCollector(cfg Config) (*bench.Collector, error) {
	opts, err := benchOptions(cfg)
	if err != nil {
		return nil, err
	}
	return bench.NewCollector(opts)
}

func writeBench(cfg Config, rep bench.Report, w io.Writer) error {
	if !cfg.NoSummary && len(rep.Metrics) > 0 {
		if err := bench.WriteSummary(w, rep); err != nil {
			return err
		}
	}
	if cfg.ReportFile != "" {
		if err := rep.WriteJSON(cfg.ReportFile); err != nil {
			return fmt.Errorf("--report: %w", err)
		}
	}
	if cfg.PlotFile != "" {
		// A job that printed no throughput over time has nothing to draw;
		// that does not make it fail.
		if !hasSeries(rep) {
			_, err := fmt.Fprintf(w, "bench: nothing to plot (no throughput over time recognised); %s not written\n", cfg.PlotFile)
			return err
		}
		if err := bench.WritePlot(cfg.PlotFile, rep); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
	}
	return nil
}

// hasSeries reports whether some rank has a sample after warm-up, which
// is what bench.WritePlot draws.
func hasSeries(rep bench.Report) bool {
	for _, mr := range rep.Metrics {
		for _, rr := range mr.Ranks {
			for _, p := range rr.Series {
				if !p.Warmup {
					return true
				}
			}
		}
	}
	return false
}

func analyze(ctx context.Context, cfg Config, stdout, stderr io.Writer) int {
	opts, err := benchOptions(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "launcher: %v\n", err)
		return ExitUsage
	}
	rep, err := bench.AnalyzeFiles(ctx, cfg.Argv, opts)
	if err != nil {
		fmt.Fprintf(stderr, "launcher: %v\n", err)
		return ExitSetup
	}
	if len(rep.Metrics) == 0 {
		fmt.Fprintf(stderr, "launcher: no throughput lines found in %s\n", strings.Join(cfg.Argv, ", "))
		return ExitSetup
	}
	cfg.NoSummary = false
	if err := writeBench(cfg, rep, stdout); err != nil {
		fmt.Fprintf(stderr, "launcher: %v\n", err)
		return ExitSetup
	}
	return 0
}
