package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gangway-hpc/gangway/cmd/internal/scalebed"
	"github.com/gangway-hpc/gangway/internal/textx"
)

// scaleWidth is the tree contender's --tree-width (auto's width).
const scaleWidth = 32

// scaleBarriers is how many barriers each rank of the scale scenario
// times after the one that waits for every rank to start.
const scaleBarriers = 20

// scaleCounts are the agent counts of the scale scenario.
func (b *bench) scaleCounts() []int {
	if b.o.scaleCounts != nil {
		return b.o.scaleCounts
	}
	if b.o.quick {
		return []int{64, 256}
	}
	return []int{256, 1024, 4096, 10000}
}

// widths are the scale scenario's --tree-width contenders.
func (b *bench) widths() []int {
	if b.o.scaleWidths != nil {
		return b.o.scaleWidths
	}
	return []int{0, scaleWidth}
}

// scaleCase names a scale case: "1024 agents, tree (--tree-width 32)".
func scaleCase(n, width int) string {
	if width == 0 {
		return fmt.Sprintf("%d agents, flat (--tree-width 0)", n)
	}
	return fmt.Sprintf("%d agents, tree (--tree-width %d)", n, width)
}

// scaleRanksCase names a scale case of k ranks per agent: "1024 agents x
// 8 ranks, tree (--tree-width 32)"; one rank is scaleCase's name.
func scaleRanksCase(n, k, width int) string {
	if k == 1 {
		return scaleCase(n, width)
	}
	c := scaleCase(n, width)
	i := strings.Index(c, ",")
	return fmt.Sprintf("%s x %d ranks%s", c[:i], k, c[i:])
}

// scaleTag is in every rank's environment (-x), for the sweep after
// each run that must find none of them left.
const scaleTag = "GWBENCH_SCALE"

// scale is scenario 4: a job of one treerank per agent (-scale-ranks k:
// k per agent) on 256 to 10,000
// agents on loopback addresses, flat and through the agent tree,
// interleaved per count; per run the time until every rank has started,
// the launcher's wall, CPU, peak RSS and TCP connections, a PMI barrier
// across all ranks, and the agents' own CPU.
func (b *bench) scale(ctx context.Context) error {
	rank, err := b.buildTreeRank(ctx)
	if err != nil {
		return err
	}
	// Counts whose ranks cannot fit the machine's tasks are skipped
	// before any agent starts (the agents are as many as the largest).
	var counts []int
	for _, n := range b.scaleCounts() {
		if err := tasksFit(n, b.o.scaleRanks, readTaskLimits()); err != nil {
			b.skip("scale: %v", err)
			continue
		}
		counts = append(counts, n)
	}
	if len(counts) == 0 {
		return nil
	}
	t0 := time.Now()
	la, err := startLoopAgents(ctx, counts[len(counts)-1], b.o.scaleRanks, filepath.Join(b.dir, "loop"))
	if err != nil {
		return err
	}
	defer la.stop()
	b.progress("scale: %d agents in %d worker processes on 127.0.%d-%d.x:%d in %v", len(la.addrs), len(la.workers), loopSubnet, loopSubnet+(len(la.addrs)-1)/250, loopPort, time.Since(t0).Round(time.Millisecond))
	idle := b.idleRate(ctx, la)
	b.config = append(b.config, ConfigLine{"scale", fmt.Sprintf("agents (sshd.Server + agent.Agent) in gwbench worker processes of at most %d agents each, on 127.0.190+.x:%d, every rank a child of its agent's worker, %s; %s per host: treerank (C, PMI-1 on PMI_FD: init, a barrier, %d timed barriers, prints RANK, WORLD_SIZE, PMI_RANK, its start time and its median barrier); launcher -hostfile (slots=%d) --start-timeout 10m --tree-width %s (0 flat); every rank's RANK/WORLD_SIZE/PMI_RANK checked and a /proc sweep for the ranks' tag after each run; agents' idle CPU %.1f ms/s subtracted; runs above 1024 ranks in all: at most 3, no warm-up", la.per, loopPort, la.gpuNote(), textx.Count(b.o.scaleRanks, "rank"), scaleBarriers, b.o.scaleRanks, strings.Trim(strings.Join(strings.Fields(fmt.Sprint(b.widths())), " or "), "[]"), idle)})
	for _, n := range counts {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := b.scaleCount(ctx, la, rank, n, idle); err != nil {
			return err
		}
	}
	return nil
}

// scaleTimeout bounds one scale run of n ranks in all (agents times
// ranks per agent) on the two-CPU bed.
func scaleTimeout(n int) time.Duration {
	switch {
	case n > 4096:
		return 30 * time.Minute
	case n > 1024:
		return 6 * time.Minute
	}
	return 3 * time.Minute
}

// idleRate is the agents' own CPU while no job runs, in ms per second.
func (b *bench) idleRate(ctx context.Context, la *loopAgents) float64 {
	const d = 3 * time.Second
	c0, t0 := la.cpu(), time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	return ms(la.cpu()-c0) / time.Since(t0).Seconds()
}

// scaleCount runs the flat and the tree contender at n agents.
func (b *bench) scaleCount(ctx context.Context, la *loopAgents, rank string, n int, idle float64) error {
	k := b.o.scaleRanks
	hf, err := la.hostfile(n, k)
	if err != nil {
		return err
	}
	saved := b.o
	defer func() { b.o = saved }()
	note := "agents in worker processes, ranks forked by them; launcher, agents and ranks on the same CPUs"
	// What stalls the bed is its processes: 1,024 agents of eight ranks
	// each load it as 8,192 agents of one would.
	heavy := n*k > 1024
	if heavy {
		b.o.runs, b.o.warmup = min(b.o.runs, 3), 0
		note += fmt.Sprintf("; %d runs, no warm-up (minutes per run here)", b.o.runs)
	}
	timeout := scaleTimeout(n * k)
	sshConfig, err := b.scaleSSHConfig(n * k)
	if err != nil {
		return err
	}
	if sshConfig != nil {
		note += "; -F ssh_config with ServerAliveInterval 10, ServerAliveCountMax 30, ConnectTimeout 120 (hosts lost after 5 min, not 15 s; logins within 2 min, not 20 s); agents' --version-timeout 1m, --login-grace-time 2m"
	}
	var cs []contender
	var rows [][]*Result
	for _, width := range b.widths() {
		cas := scaleRanksCase(n, k, width)
		row := func(metric, unit, note string) *Result {
			return &Result{Scenario: "scale", Case: cas, Metric: metric, Unit: unit, Launcher: lGangway, Kind: Info, Note: note}
		}
		end := row("launcher wall (to the job's end)", "ms", "")
		cpu := row("launcher CPU (user+sys)", "ms", "")
		cpuStart := row("launcher CPU to all ranks started (user+sys)", "ms", "/proc/PID/stat polled every 10 ms (10 ms ticks): the last read before the latest rank's start")
		rss := row("launcher peak RSS (VmHWM)", "MiB", "/proc/PID/status polled every 10 ms")
		conns := row("launcher TCP connections (peak)", "conns", "its socket inodes listed ESTABLISHED in /proc/PID/net/tcp{,6}, read at each new high of its sockets (when it holds for 100 ms, at most 1/s while it climbs)")
		bar := row(fmt.Sprintf("PMI barrier across all ranks (each rank's median of %d, max over ranks)", scaleBarriers), "us", "")
		acpu := row("agents' own CPU (workers' utime+stime, idle subtracted)", "ms", fmt.Sprintf("10 ms ticks; idle %.1f ms/s x wall subtracted", idle))
		rows = append(rows, []*Result{end, cpu, cpuStart, rss, conns, bar, acpu})

		var a0 time.Duration
		var last treeRun
		var peakConns, peakSockets int
		var connErr error
		argv := append(append([]string{b.bins.launcher}, la.args(hf)...), sshConfig...)
		argv = append(argv, scaleJob(width, rank)...)
		giveUp := 0 // interleave's default
		if heavy {
			giveUp = 1 // a failed run costs minutes
		}
		cs = append(cs, contender{
			name: cas, kind: Ours, timeout: timeout, hwm: true, capture: true, giveUp: giveUp,
			argv:   argv,
			run:    runTreeRanks,
			before: func() { a0 = la.cpu() },
			watch: func(pid int) func() {
				w := watchConns(pid)
				return func() { peakConns, peakSockets, connErr = w.end() }
			},
			value: func(o outcome) (float64, error) {
				tr, err := parseTreeRun(o.Stdout, n*k)
				if err := errors.Join(err, scaleLeftovers()); err != nil {
					return 0, err
				}
				last = tr
				started := o.End.Add(-o.Took).UnixNano()
				return float64(tr.lastStart-started) / 1e6, nil
			},
			after: func(o outcome) {
				end.Values = append(end.Values, ms(o.Took))
				cpu.Values = append(cpu.Values, ms(o.CPU))
				cpuStart.Values = append(cpuStart.Values, ms(cpuAt(o.CPUTrace, time.Unix(0, last.lastStart))))
				rss.Values = append(rss.Values, o.HWM)
				if connErr == nil {
					conns.Values = append(conns.Values, float64(peakConns))
					conns.Note = fmt.Sprintf("its socket inodes listed ESTABLISHED in /proc/PID/net/tcp{,6}, read at each new high of its sockets (when it holds for 100 ms, at most 1/s while it climbs); socket descriptors at most %d", peakSockets)
				} else {
					conns.Note = joinNote(conns.Note, "sampling failed: "+connErr.Error())
				}
				bar.Values = append(bar.Values, float64(last.barrierMax)/1e3)
				bar.Note = fmt.Sprintf("median over ranks %.0f us (last run)", float64(last.barrierMed)/1e3)
				acpu.Values = append(acpu.Values, max(0, ms(la.cpu()-a0)-idle*o.Took.Seconds()))
			},
		})
	}
	if b.o.scaleQuiet > 0 {
		for _, width := range b.widths() {
			argv := append(append([]string{b.bins.launcher}, la.args(hf)...), sshConfig...)
			c, r := quietContender(scaleRanksCase(n, k, width), argv, width, n*k, b.o.scaleQuiet, timeout)
			cs, rows = append(cs, c), append(rows, r)
		}
	}
	b.progress("scale: %d agents, flat and tree (%d+%d rounds)", n, b.o.warmup, b.o.runs)
	res := b.interleave(ctx, caseSpec{scenario: "scale", name: "loopback agents", metric: "all ranks started (latest rank start - launcher fork)", unit: "ms"}, cs)
	for i, r := range res {
		r.Case, r.Launcher = cs[i].name, lGangway
		r.Note = joinNote(r.Note, note)
		for _, x := range rows[i] {
			b.add(x)
		}
	}
	return ctx.Err()
}

// scaleJob is the launcher's arguments for the scale job through a tree
// of width (0: flat) after the hosts and ssh options: every rank tagged
// for the sweep after the run, treerank and its barriers.
func scaleJob(width int, rank string) []string {
	return []string{"--tree-width", strconv.Itoa(width), "--start-timeout", "10m", "-x", scaleTag + "=1", rank, strconv.Itoa(scaleBarriers)}
}

// scaleLeftovers is the sweep after a scale run: an error when a process
// of the job still ran after the launcher returned (it is killed), or the
// sweep failed.
func scaleLeftovers() error {
	switch left, err := leftovers(scaleTag + "=1"); {
	case err != nil:
		return err
	case left > 0:
		return fmt.Errorf("%d of the job's processes still ran after the launcher returned (killed)", left)
	}
	return nil
}

// leftovers counts (and kills) the processes whose environment holds kv.
func leftovers(kv string) (int, error) {
	pids, err := taggedPids(kv)
	if err != nil {
		return 0, err
	}
	if len(pids) == 0 {
		return 0, nil
	}
	return len(pids), killPids(pids)
}

// runTreeRanks is runTimed, with what failed ranks said on stderr
// ("treerank: ...") added to a failure, and the launcher's stderr (its
// last 4 MiB) kept in a file the failure names: a run of thousands of
// hosts that fails costs minutes, and its first error is rarely in the
// last lines.
func runTreeRanks(ctx context.Context, s cmdSpec) outcome {
	s.errMax = 4 << 20
	o := runTimed(ctx, s)
	if o.Err == nil {
		return o
	}
	if f, err := os.CreateTemp("", "gwbench-scale-failed-*.stderr"); err == nil {
		_, werr := f.WriteString(o.Stderr)
		if cerr := f.Close(); werr == nil && cerr == nil {
			o.Err = fmt.Errorf("%w; the launcher's stderr is in %s", o.Err, f.Name())
		}
	}
	var said []string
	for line := range strings.Lines(o.Stderr) {
		if strings.Contains(line, "treerank:") && len(said) < 3 {
			said = append(said, strings.TrimSpace(line))
		}
	}
	if len(said) > 0 {
		o.Err = fmt.Errorf("%w; ranks said: %s", o.Err, strings.Join(said, " | "))
	}
	return o
}

// scaleSSHConfig is the launcher's -F for a scale run of n ranks in all
// (agents times ranks per agent), or none: scalebed.SSHConfig above
// 1024, whose agents and ranks on this machine's few CPUs stall past the
// launcher's default 15 s keepalive bound during the launch (seen at
// 4,096 agents of one rank on 2 CPUs, at 1,024 agents of eight, and at
// 10,000 agents everywhere), which a real node with its own CPUs does
// not.
func (b *bench) scaleSSHConfig(n int) ([]string, error) {
	if n <= 1024 {
		return nil, nil
	}
	cfg := filepath.Join(b.dir, "ssh_config-scale")
	if err := os.WriteFile(cfg, []byte(scalebed.SSHConfig), 0o644); err != nil {
		return nil, err
	}
	return []string{"-F", cfg}, nil
}

// taskLimits are the machine's bounds on its tasks (processes and
// threads alike take a pid) and how many it has now; 0 is unknown.
type taskLimits struct {
	pidMax, threadsMax, now int
}

// readTaskLimits reads them from /proc; what it cannot read is 0.
func readTaskLimits() taskLimits {
	num := func(path string, field int) int {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0
		}
		f := strings.FieldsFunc(string(b), func(r rune) bool { return r == ' ' || r == '\n' || r == '/' })
		if len(f) <= field {
			return 0
		}
		v, _ := strconv.Atoi(f[field])
		return v
	}
	// /proc/loadavg: "0.10 0.20 0.30 running/total last-pid".
	return taskLimits{pidMax: num("/proc/sys/kernel/pid_max", 0), threadsMax: num("/proc/sys/kernel/threads-max", 0), now: num("/proc/loadavg", 4)}
}

// tasksFit says why n agents of k ranks each cannot start here, or nil:
// every rank takes two tasks (256 agents x 8 ranks peaked at about 4,100
// tasks more than the machine ran before), on top of the tasks the
// machine already runs and a margin for the launcher's and the workers'
// threads. Seen without it: 2,048 x 8 on machines whose pid_max is
// 32,768 failed part-way, "fork: resource temporarily unavailable",
// while 1,536 x 8 ran.
func tasksFit(n, k int, l taskLimits) error {
	const margin = 2000
	need := 2*n*k + l.now + margin
	for _, lim := range []struct {
		name string
		v    int
	}{{"kernel.pid_max", l.pidMax}, {"kernel.threads-max", l.threadsMax}} {
		if lim.v > 0 && need > lim.v {
			return fmt.Errorf("%d agents x %s need about %d tasks (%d ranks at two tasks each, %d running now, %d for threads), over this machine's %s %d: run fewer (-scale-counts, -scale-ranks)", n, textx.Count(k, "rank"), need, n*k, l.now, margin, lim.name, lim.v)
		}
	}
	return nil
}
