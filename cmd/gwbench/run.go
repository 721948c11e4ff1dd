package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

const usage = `usage: gwbench [options]

Benchmarks gangway against mpirun, mpiexec.hydra, pdsh and a bash ssh
fan-out on network-namespace hosts (198.18.190.0/24, namespaces gwb0h*)
and loopback agents (worker processes) on 127.0.190-229.x, and against srun on a Slurm
cluster of such hosts (198.18.199.0/24, namespaces gws90h*). Needs root, bin/launcher and
bin/agent (make build). Prints a table and the configuration, writes
OUT/<timestamp>.json and (full runs) rewrites BENCHMARKS.md.

Options:
`

// options are gwbench's flags.
type options struct {
	quick    bool
	out      string
	md       string
	runs     int
	warmup   int
	only     []string
	binDir   string
	profile  string
	verbose  bool
	outBytes int64
	hold     time.Duration
	// scaleCounts replaces the scale scenario's agent counts (-scale-counts).
	scaleCounts []int
	// scaleWidths are the scale scenario's --tree-width contenders
	// (-scale-widths; default flat and 32).
	scaleWidths []int
	// scaleRanks are the ranks per agent of the scale scenario
	// (-scale-ranks; default 1).
	scaleRanks int
	// scaleQuiet adds a quiet job to the scale scenario: ranks that
	// sleep this long, for the launcher's CPU over a job's end
	// (-scale-quiet; 0: none).
	scaleQuiet time.Duration
}

var scenarios = []string{"memory", "launch", "output", "pmi", "failstop", "recover", "scale", "treepath", "slurm"}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("gwbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	fs.BoolVar(&o.quick, "quick", false, "the reduced set of make bench-quick (under 3 minutes)")
	fs.StringVar(&o.out, "out", "bench/results", "directory for the JSON results")
	fs.StringVar(&o.md, "md", "", "markdown file to rewrite (default BENCHMARKS.md for full runs, none for -quick; \"-\" for none)")
	fs.IntVar(&o.runs, "runs", 0, "measured runs per launcher and case (default 7, 5 with -quick)")
	fs.IntVar(&o.warmup, "warmup", 1, "warm-up runs per launcher and case, not counted")
	scaleCounts := fs.String("scale-counts", "", "comma-separated agent counts for the scale scenario instead of its own (256,1024,4096,10000; -quick 64,256)")
	fs.IntVar(&o.scaleRanks, "scale-ranks", 1, "ranks per agent in the scale scenario (1 to 16; 8 is a DGX host's shape)")
	fs.DurationVar(&o.scaleQuiet, "scale-quiet", 0, "also run a quiet job in the scale scenario, every rank sleeping this long, for the launcher's CPU over the job's end (0: none; 60s shows it at 4096 agents)")
	scaleWidths := fs.String("scale-widths", "", "comma-separated --tree-width values the scale scenario runs (default 0,32: flat and tree)")
	only := fs.String("only", "", "comma-separated scenarios to run: "+strings.Join(scenarios, ","))
	fs.StringVar(&o.binDir, "bin", "bin", "directory holding launcher and agent")
	fs.StringVar(&o.profile, "profile", "", "also run the launcher in process under pprof and write CPU profiles (and, for the run of the scale job, heap and goroutine profiles at their peaks) to this directory")
	fs.BoolVar(&o.verbose, "v", false, "log test-bed progress")
	fs.Int64Var(&o.outBytes, "output-bytes", 0, "bytes each rank writes in the output scenario (default 64 MiB, 8 MiB with -quick)")
	bedN := fs.Int("bed", 0, "test bed number N (0-9): namespaces gwbN*, subnet 198.18.(190+N).0/24, so two runs can coexist")
	fs.DurationVar(&o.hold, "hold", 0, "debugging: build the bed, print the launchers' command lines, keep it this long, then remove it")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *bedN < 0 || *bedN > 9 {
		return o, errors.New("-bed must be 0..9")
	}
	bedPrefix, bedSubnet = fmt.Sprintf("gwb%d", *bedN), 190+*bedN
	if o.runs == 0 {
		o.runs = 7
		if o.quick {
			o.runs = 5
		}
	}
	if o.outBytes == 0 {
		o.outBytes = 64 << 20
		if o.quick {
			o.outBytes = 8 << 20
		}
	}
	if o.md == "" && !o.quick {
		o.md = "BENCHMARKS.md"
	}
	if o.md == "-" {
		o.md = ""
	}
	if *only != "" {
		for _, s := range strings.Split(*only, ",") {
			if !slices.Contains(scenarios, s) {
				return o, fmt.Errorf("-only: unknown scenario %q (want %s)", s, strings.Join(scenarios, ","))
			}
			o.only = append(o.only, s)
		}
	}
	var err error
	if o.scaleCounts, err = intList("-scale-counts", *scaleCounts, func(n int) bool { return n >= 1 && n <= 20000 }, "a count from 1 to 20000"); err != nil {
		return o, err
	}
	if o.scaleWidths, err = intList("-scale-widths", *scaleWidths, func(n int) bool { return n == 0 || n >= 2 && n <= 1024 }, "0 (flat) or a tree width from 2 to 1024"); err != nil {
		return o, err
	}
	if o.scaleQuiet < 0 || o.scaleQuiet > time.Hour {
		return o, fmt.Errorf("-scale-quiet %v: from 0 to 1h", o.scaleQuiet)
	}
	if o.scaleRanks < 1 || o.scaleRanks > 16 {
		return o, errors.New("-scale-ranks must be 1..16")
	}
	if o.runs < 1 || o.runs > 50 || o.warmup < 0 || o.warmup > 10 {
		return o, errors.New("-runs must be 1..50 and -warmup 0..10")
	}
	return o, nil
}

// intList parses flag's comma-separated integers, each one ok accepts
// (want says which); nil when s is empty.
func intList(flag, s string, ok func(int) bool, want string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || !ok(n) {
			return nil, fmt.Errorf("%s: %q is not %s", flag, f, want)
		}
		out = append(out, n)
	}
	return out, nil
}

func (o options) want(s string) bool { return len(o.only) == 0 || slices.Contains(o.only, s) }

// bench is one gwbench run.
type bench struct {
	o        options
	stdout   io.Writer
	stderr   io.Writer
	dir      string // scratch directory, removed at the end
	bins     bins
	net      *netEnv
	results  []*Result
	config   []ConfigLine
	skipped  []string
	extra    map[string]string
	mpiBin   string // compiled pmibench, "" until built
	treeRank string // compiled treerank, "" until built
	version  string // git describe at the start (bin/ is built from that tree)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "-gen" {
		return genMain(args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "-loop-agents" {
		return loopWorkerMain(ctx, args[1:], os.Stdin, stdout, stderr)
	}
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "gwbench:", err)
		return 2
	}
	b := &bench{o: o, stdout: stdout, stderr: stderr, extra: map[string]string{}}
	if err := b.resolveBins(); err != nil {
		fmt.Fprintln(stderr, "gwbench:", err)
		return 1
	}
	if b.dir, err = os.MkdirTemp("", "gwbench-"); err != nil {
		fmt.Fprintln(stderr, "gwbench:", err)
		return 1
	}
	_ = os.Chmod(b.dir, 0o755)
	defer os.RemoveAll(b.dir)
	start := time.Now()
	code := b.all(ctx)
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "gwbench: interrupted; test bed removed, nothing written")
		return 130
	}
	if code != 0 {
		return code
	}
	return b.finish(start)
}

func (b *bench) logf(format string, args ...any) {
	if b.o.verbose {
		fmt.Fprintf(b.stderr, "gwbench: "+format+"\n", args...)
	}
}

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(b.stderr, "gwbench: "+format+"\n", args...)
}

func (b *bench) resolveBins() error {
	dir, err := filepath.Abs(b.o.binDir)
	if err != nil {
		return err
	}
	b.bins = bins{launcher: filepath.Join(dir, "launcher"), agent: filepath.Join(dir, "agent")}
	for _, p := range []string{b.bins.launcher, b.bins.agent} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s missing (run make build first): %w", p, err)
		}
	}
	if b.bins.self, err = os.Executable(); err != nil {
		return fmt.Errorf("find own executable (the output generator): %w", err)
	}
	return nil
}

// all runs the selected scenarios on one bed, removed before it returns.
func (b *bench) all(ctx context.Context) int {
	b.describe()
	needNet := b.o.want("memory") || b.o.want("launch") || b.o.want("output") || b.o.want("pmi") || b.o.want("failstop") || b.o.want("recover")
	if needNet {
		t0 := time.Now()
		hosts := 16
		if b.o.want("recover") {
			hosts++ // the spare of "lost host to all ranks running again on a spare"
		}
		var err error
		b.net, err = setupNet(ctx, hosts, b.bins, b.dir, b.logf)
		defer func() {
			if err := b.net.close(); err != nil {
				fmt.Fprintln(b.stderr, "gwbench: removing the test bed:", err)
			}
		}()
		if err != nil {
			fmt.Fprintln(b.stderr, "gwbench: test bed:", err)
			return 1
		}
		b.progress("test bed: %d namespace hosts with sshd and agent in %v", hosts, time.Since(t0).Round(time.Millisecond))
		if b.o.hold > 0 {
			b.printCommands()
			select {
			case <-ctx.Done():
			case <-time.After(b.o.hold):
			}
			return 130
		}
	}
	steps := []struct {
		name string
		fn   func(context.Context) error
		full bool // left out of -quick unless -only names it
	}{
		{"memory", b.memory, false},
		{"launch", b.launch, false},
		{"output", b.output, false},
		{"pmi", b.pmi, false},
		{"failstop", b.failstop, true},
		{"recover", b.recover, true},
		{"scale", b.scale, false},
		{"treepath", b.treepath, false},
		{"slurm", b.slurm, false},
	}
	for _, s := range steps {
		if !b.o.want(s.name) || ctx.Err() != nil {
			continue
		}
		if s.full && b.o.quick && len(b.o.only) == 0 {
			b.skip("%s: full runs only (about 2 minutes; -quick -only %s runs it)", s.name, s.name)
			continue
		}
		t0 := time.Now()
		if err := s.fn(ctx); err != nil {
			if ctx.Err() != nil {
				return 130
			}
			b.skip("%s: %v", s.name, err)
		}
		b.progress("%s done in %v", s.name, time.Since(t0).Round(time.Second))
	}
	if b.net != nil && b.o.want("memory") {
		b.agentHWM()
	}
	if b.o.profile != "" && ctx.Err() == nil {
		if err := b.profiles(ctx); err != nil {
			b.skip("profiles: %v", err)
		}
	}
	return 0
}

func (b *bench) skip(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.skipped = append(b.skipped, msg)
	fmt.Fprintln(b.stderr, "gwbench: skipped:", msg)
}

func (b *bench) add(r *Result) *Result {
	b.results = append(b.results, r)
	return r
}

// describe records the configuration printed beside the numbers.
func (b *bench) describe() {
	add := func(k, v string) { b.config = append(b.config, ConfigLine{k, v}) }
	add("machine", fmt.Sprintf("%d CPUs, %s; load average at start %s", runtime.NumCPU(), kernel(), loadavg()))
	b.version = gitDescribe()
	add("gangway", b.version+", "+runtime.Version())
	add("hosts", fmt.Sprintf("network namespaces %sh0..15 on bridge %sbr, 198.18.%d.1-16/24, each with its own UTS namespace (hostname = its address); agents (under setsid, as a service) on :%d (steady state), OpenSSH sshd on :%d", bedPrefix, bedPrefix, bedSubnet, agentPort, sshdPort))
	add("openssh", "client "+firstLine("ssh", "-V")+"; -F /dev/null, ed25519 key, -o KexAlgorithms=curve25519-sha256 (server: curve25519-sha256 only), clean shell (empty ~/.bashrc)")
	add("peers", strings.Join([]string{version(mpirunBin, "--version"), version(hydraBin, "--version"), version(pdshBin, "-V")}, "; "))
	add("mpirun", "--allow-run-as-root --mca plm_rsh_agent <ssh wrapper> --mca oob_tcp_if_include/btl_tcp_if_include 198.18.190.0/24 --mca pml ob1 --mca btl tcp,self (tree spawn default; no tree: --mca plm_rsh_no_tree_spawn 1)")
	add("hydra", "-launcher ssh -launcher-exec <ssh wrapper> -iface "+bedPrefix+"br -f <host:k file>")
	add("pdsh, fan-out", "pdsh -R ssh -f 256 -w 198.18.190.[1-N], PDSH_SSH_ARGS=<same ssh options> -l%u %h; bash: one ssh per host in the background, wait; both run '"+shellTrue8+"'")
	add("gangway cold", "launcher --transport ssh --ssh '/usr/bin/ssh <same options>' --agent-path bin/agent (agent --stdio per host)")
	add("rank failure", fmt.Sprintf("16 hosts x 1 and x 8 ranks; every rank but rank %d runs 'sleep 600 &' and then 'exec sleep 600'; once gwbench has seen every rank up and opened a pidfd on every process of the job (found by %s=<tag> in its environment: ranks start as 'env %s=<tag> rank', children inherit it), rank %d (host 1 at 1 per host, host 0 at 8 per host) writes 'date +%%s.%%N' and exits 3; sample: from that timestamp to the later of the last process of the job exiting (a zombie counts) and the launcher returning; a job still running %v after the failure did not stop (killed, the run fails); ranks do a PMI-1 init where they get PMI_FD (gangway, Hydra), as MPI programs do; exit status: gangway must return 3, peers non-zero; mpirun with tree spawn, all launchers with their default stop settings", failRank, failVar, failVar, failRank, failLimit))
	add("MPICH ranks", "UCX_TLS=tcp,self,sm UCX_NET_DEVICES="+"enp1s0f0 (both launchers)")
	add("method", fmt.Sprintf("wall time from fork to exit of the launcher in the root namespace; launchers interleaved per round (A B C A B C ...), %d warm-up + %d measured rounds; median [min, max]; ours/theirs: gangway's median over the peer's (for gangway rows: over the best peer's)", b.o.warmup, b.o.runs))
}

func kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return "Linux " + strings.TrimSpace(string(b))
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func gitDescribe() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown version"
	}
	return "git " + strings.TrimSpace(string(out))
}

func firstLine(name string, args ...string) string {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil && len(out) == 0 {
		return name + " (not found)"
	}
	l, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return l
}

func version(name string, args ...string) string {
	if !have(name) {
		return name + " not installed"
	}
	l := firstLine(name, args...)
	if strings.Contains(name, "hydra") {
		out, _ := exec.Command(name, args...).CombinedOutput()
		for line := range strings.Lines(string(out)) {
			if strings.Contains(line, "Version:") {
				return name + " " + strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "Version:"))
			}
		}
	}
	return l
}

// printCommands prints the 16-host launch command lines (for -hold).
func (b *bench) printCommands() {
	e := b.net
	j := jobSpec{Hosts: 16, PerHost: 8, Argv: []string{"/bin/true"}}
	m, _ := e.mpirun(j, true)
	h, _ := e.hydra(j)
	p, penv := e.pdsh(16)
	for _, c := range [][]string{e.gangway(j), e.gangwayCold(j), m, h, append(penv, p...), e.sshFanout(16)} {
		fmt.Fprintln(b.stdout, shellJoin(c))
	}
}
