package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The scenario "rank failure to all stopped" (failstop): how long after
// one rank fails every rank on every host is gone and the launcher has
// returned, on 16 hosts with 1 and with 8 ranks per host.
//
// Every rank but rank 1 starts a child (`sleep 600 &`), reports itself up
// with a file and becomes `sleep 600`, as a trainer with a data-loader
// worker sits in a collective. Rank 1 reports itself up too, waits until
// gwbench has seen every rank up and opened a pidfd on every process of
// the job, writes its CLOCK_REALTIME (`date +%s.%N`) to a file and exits
// 3. The sample runs
// from that timestamp to the later of two moments: the last process of
// the job exiting (pidfds; a zombie counts as exited) and the launcher
// returning. The job's processes are found by an environment variable
// each rank starts with and its children inherit, so the same
// observation serves every launcher.

const (
	failRank   = 1
	failMetric = "rank failure to all stopped"
	failVar    = "GWBENCH_FAILSTOP" // the tag in every process of the job
	// failLimit is how long after the failure a job may take to stop;
	// past it the run counts as "did not stop" and gwbench kills it.
	failLimit = 10 * time.Second
	failUpBy  = 60 * time.Second // every rank up within this of the start
)

// failstopRank is the rank program: rank DIR FAILRANK, started as
// `env GWBENCH_FAILSTOP=TAG rank ...` so that the tag is in the shell's
// own /proc/PID/environ (which shows the environment exec gave a process,
// not what a shell exports later) and in every child's. Where the
// launcher gives the rank a PMI_FD (gangway, Hydra) it first does a PMI-1
// init, as an MPI program's first step would: Hydra stops a job on a
// rank's end only if that rank spoke PMI.
const failstopRank = `#!/bin/sh
# failstop rank: written by gwbench (cmd/gwbench/scen_failstop.go).
d=$1
r=${OMPI_COMM_WORLD_RANK:-$PMI_RANK}
if [ -z "$r" ]; then echo "failstop rank: no OMPI_COMM_WORLD_RANK or PMI_RANK" >&2; exit 2; fi
if [ -n "$PMI_FD" ]; then
	/bin/bash -c 'printf "cmd=init pmi_version=1 pmi_subversion=1\n" >&"$PMI_FD" && read -r reply <&"$PMI_FD" && case $reply in *rc=0*) ;; *) exit 1 ;; esac' ||
		{ echo "failstop rank $r: PMI-1 init on fd $PMI_FD failed" >&2; exit 2; }
fi
` + rankSleepOrFail

// rankSleepOrFail ends the rank scripts of failstop and recover: rank $2
// reports itself up, waits for gwbench's go, writes its CLOCK_REALTIME to
// failed and exits 3; every other rank starts a child, reports itself up
// and becomes sleep 600.
const rankSleepOrFail = `if [ "$r" = "$2" ]; then
	: >"$d/up/$r"
	i=0
	while [ ! -e "$d/go" ]; do
		i=$((i + 1))
		if [ "$i" -gt 1200 ]; then echo "rank $r: no go from gwbench within 60 s" >&2; exit 4; fi
		sleep 0.05
	done
	date +%s.%N >"$d/failed"
	exit 3
fi
sleep 600 &
: >"$d/up/$r"
exec sleep 600
`

// failCase names the case of perHost ranks on each of hosts hosts.
func failCase(hosts, perHost int) string {
	ranks := "ranks"
	if perHost == 1 {
		ranks = "rank"
	}
	return fmt.Sprintf("%d hosts x %d %s (sleep with a child), rank %d exits 3", hosts, perHost, ranks, failRank)
}

// failstop runs the scenario: gangway, Hydra and mpirun interleaved, at 1
// and at 8 ranks per host.
func (b *bench) failstop(ctx context.Context) error {
	e := b.net
	dir := filepath.Join(b.dir, "failstop")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	script := filepath.Join(dir, "rank")
	if err := os.WriteFile(script, []byte(failstopRank), 0o755); err != nil {
		return err
	}
	run := filepath.Join(dir, "run")
	tag := fmt.Sprintf("gwbench-%d", os.Getpid())
	hosts := e.jobHosts()
	for _, per := range []int{1, 8} {
		j := jobSpec{Hosts: hosts, PerHost: per, Argv: []string{"/usr/bin/env", failVar + "=" + tag, script, run, strconv.Itoa(failRank)}}
		np := j.np()
		newRun := func(code int) *failRun {
			return &failRun{dir: run, tag: failVar + "=" + tag, np: np, wantCode: code, codes: map[int]int{}}
		}
		type entry struct {
			c contender
			f *failRun
		}
		var es []entry
		add := func(c contender, f *failRun) {
			c.run, c.timeout = f.run, 2*time.Minute
			c.value = func(outcome) (float64, error) { return ms(f.last.stopped), nil }
			c.after = func(outcome) { f.record() }
			es = append(es, entry{c, f})
		}
		add(contender{name: lGangway, kind: Ours, argv: e.gangway(j)}, newRun(3))
		if b.peer(hydraBin) {
			h, err := e.hydra(j)
			if err != nil {
				return err
			}
			add(contender{name: lHydra, kind: Peer, argv: h,
				note: "ranks do a PMI-1 init: Hydra ignores the end of a rank that never spoke PMI"}, newRun(-1))
		}
		if b.peer(mpirunBin) {
			m, err := e.mpirun(j, true)
			if err != nil {
				return err
			}
			add(contender{name: lMpirun, kind: Peer, argv: m}, newRun(-1))
		}
		cs := make([]contender, len(es))
		for i, x := range es {
			cs[i] = x.c
		}
		name := failCase(hosts, per)
		b.progress("failstop: %s (%d launchers, %d+%d rounds)", name, len(cs), b.o.warmup, b.o.runs)
		res := b.interleave(ctx, caseSpec{scenario: "failstop", name: name, metric: failMetric, unit: "ms"}, cs)
		for i, x := range es {
			res[i].Note = joinNote(res[i].Note, x.f.summary())
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// failRun is one launcher's runs in one case.
type failRun struct {
	dir, tag string // the run directory; failVar=TAG
	np       int
	wantCode int // the launcher's exit status: this one, or (-1) any but 0

	last failSample // the run just done

	ranksMS, launcherMS []float64   // measured runs
	codes               map[int]int // exit status -> measured runs
	leftAtExit          int         // most processes still running when the launcher returned
}

// run is one run: the launcher, and beside it the watch of the job's
// processes. A non-zero exit is what a run should end with.
func (f *failRun) run(ctx context.Context, s cmdSpec) outcome {
	f.last = failSample{}
	if err := os.RemoveAll(f.dir); err != nil {
		return outcome{Err: err}
	}
	if err := os.MkdirAll(filepath.Join(f.dir, "up"), 0o755); err != nil {
		return outcome{Err: err}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	exited := make(chan struct{})
	var w watchResult
	var wg sync.WaitGroup
	wg.Go(func() { w = f.watch(ctx, cancel, exited) })
	s.exitOK = true
	o := runTimed(ctx, s)
	close(exited)
	wg.Wait()
	left, err := sweep(f.tag)
	switch {
	case err != nil:
		o.Err = err
	case w.stopped:
		o.Err = w.err
		if left > 0 {
			o.Err = fmt.Errorf("%w; gwbench killed the %d processes of the job left", o.Err, left)
		}
	case o.Err != nil:
	case w.err != nil:
		o.Err = w.err
	case left > 0:
		o.Err = fmt.Errorf("%d processes of the job still ran after the launcher returned (gwbench killed them)", left)
	case f.wantCode >= 0 && o.Code != f.wantCode:
		o.Err = fmt.Errorf("exit status %d, want %d (the failed rank's)", o.Code, f.wantCode)
	case o.Code == 0:
		o.Err = errors.New("exit status 0 after a rank exited 3")
	}
	if o.Err != nil {
		return o
	}
	raw, err := os.ReadFile(filepath.Join(f.dir, "failed"))
	if err != nil {
		o.Err = fmt.Errorf("rank %d left no timestamp: %w", failRank, err)
		return o
	}
	stamp, err := parseStamp(string(raw))
	if err == nil {
		f.last, err = failstopSample(stamp, o.End, w.gone)
	}
	if err != nil {
		o.Err = fmt.Errorf("rank %d's timestamp: %w", failRank, err)
	}
	f.last.code = o.Code
	return o
}

// watchResult is what the watch of one run saw.
type watchResult struct {
	gone    []time.Time // when each process of the job exited
	err     error
	stopped bool // the watch ended the run (err says why)
}

// watch waits until every rank is up, opens a pidfd on
// every process of the job, lets the failing rank go, and waits until
// every process has exited and the launcher has returned (exited is
// closed). Past failLimit it ends the run through cancel.
func (f *failRun) watch(ctx context.Context, cancel context.CancelCauseFunc, exited <-chan struct{}) watchResult {
	stop := func(err error) watchResult {
		cancel(err)
		return watchResult{err: err, stopped: true}
	}
	up := filepath.Join(f.dir, "up")
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	by := time.Now().Add(failUpBy)
	n := 0
	for n < f.np {
		select {
		case <-ctx.Done():
			return watchResult{err: context.Cause(ctx)}
		case <-exited:
			return watchResult{err: fmt.Errorf("the launcher returned with %d of %d ranks up", n, f.np)}
		case now := <-t.C:
			if now.After(by) {
				return stop(fmt.Errorf("%d of %d ranks up after %v", n, f.np, failUpBy))
			}
		}
		ents, _ := os.ReadDir(up)
		n = len(ents)
	}
	pids, err := taggedPids(f.tag)
	if err != nil {
		return stop(err)
	}
	// Each sleeping rank and its child, and the failing rank.
	if want := 2*(f.np-1) + 1; len(pids) < want {
		return stop(fmt.Errorf("found %d processes of the job, want at least %d", len(pids), want))
	}
	ew, err := watchExits(pids)
	if err != nil {
		return stop(err)
	}
	defer ew.close()
	if err := os.WriteFile(filepath.Join(f.dir, "go"), nil, 0o644); err != nil {
		return stop(err)
	}
	deadline := time.Now().Add(failLimit)
	gone, err := ew.wait(ctx, deadline)
	if err != nil {
		return stop(err)
	}
	if ctx.Err() != nil {
		return watchResult{err: context.Cause(ctx)}
	}
	if still := len(gone) - countSet(gone); still > 0 {
		return stop(fmt.Errorf("did not stop: %d of the job's %d processes still ran %v after rank %d failed", still, len(gone), failLimit, failRank))
	}
	left := time.NewTimer(time.Until(deadline))
	defer left.Stop()
	select {
	case <-exited:
	case <-ctx.Done():
		return watchResult{err: context.Cause(ctx)}
	case <-left.C:
		return stop(fmt.Errorf("every rank gone, but the launcher still ran %v after rank %d failed", failLimit, failRank))
	}
	return watchResult{gone: gone}
}

// sweep kills whatever still carries the job's tag after a run and says
// how many there were.
func sweep(tag string) (int, error) {
	pids, err := taggedPids(tag)
	if err != nil || len(pids) == 0 {
		return 0, err
	}
	if err := killPids(pids); err != nil {
		return len(pids), err
	}
	ew, err := watchExits(pids)
	if err != nil {
		return len(pids), err
	}
	defer ew.close()
	gone, err := ew.wait(context.Background(), time.Now().Add(5*time.Second))
	if err == nil && countSet(gone) < len(gone) {
		err = fmt.Errorf("%d processes of the job survived SIGKILL", len(gone)-countSet(gone))
	}
	return len(pids), err
}

// record keeps the last run's parts (the after hook: measured runs only).
func (f *failRun) record() {
	f.ranksMS = append(f.ranksMS, ms(f.last.ranks))
	f.launcherMS = append(f.launcherMS, ms(f.last.launcher))
	f.codes[f.last.code]++
	f.leftAtExit = max(f.leftAtExit, f.last.leftAtExit)
}

// summary is the note beside the row: exit statuses, and the two moments
// the sample is the later of.
func (f *failRun) summary() string {
	if len(f.ranksMS) == 0 {
		return ""
	}
	var codes []string
	for _, c := range slices.Sorted(maps.Keys(f.codes)) {
		codes = append(codes, fmt.Sprintf("%d (%d runs)", c, f.codes[c]))
	}
	return fmt.Sprintf("exit status %s; medians after the failure: last process of the job gone %s ms, launcher returned %s ms; at most %d of the job's processes left when it returned",
		strings.Join(codes, ", "), fmtNum(Summarize(f.ranksMS).Median), fmtNum(Summarize(f.launcherMS).Median), f.leftAtExit)
}

// failSample is one run's reading, in time after the failing rank's
// timestamp.
type failSample struct {
	stopped    time.Duration // the sample: the later of ranks and launcher
	ranks      time.Duration // until the last process of the job exited
	launcher   time.Duration // until the launcher returned
	leftAtExit int           // processes of the job that exited after the launcher returned
	code       int           // the launcher's exit status
}

// failstopSample computes a run's reading from the failing rank's
// timestamp, the launcher's return and each process's exit (zero: never
// seen to exit).
func failstopSample(stamp, end time.Time, gone []time.Time) (failSample, error) {
	if len(gone) == 0 {
		return failSample{}, errors.New("no process of the job watched")
	}
	var last time.Time
	var s failSample
	for _, g := range gone {
		if g.IsZero() {
			return failSample{}, errors.New("a process of the job never exited")
		}
		if g.After(last) {
			last = g
		}
		if g.After(end) {
			s.leftAtExit++
		}
	}
	s.ranks, s.launcher = last.Sub(stamp), end.Sub(stamp)
	if s.ranks < 0 {
		return failSample{}, fmt.Errorf("every process exited %v before the timestamp", -s.ranks)
	}
	s.stopped = max(s.ranks, s.launcher)
	return s, nil
}

// parseStamp reads `date +%s.%N` output: seconds since the epoch, a dot,
// nanoseconds (fewer digits are read as a decimal fraction).
func parseStamp(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	sec, frac, ok := strings.Cut(s, ".")
	if !ok || sec == "" || frac == "" || len(frac) > 9 {
		return time.Time{}, fmt.Errorf("timestamp %q: want SECONDS.NANOSECONDS", s)
	}
	n, err := strconv.ParseInt(sec, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("timestamp %q: bad seconds", s)
	}
	ns, err := strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	if err != nil || ns < 0 {
		return time.Time{}, fmt.Errorf("timestamp %q: bad fraction", s)
	}
	return time.Unix(n, ns), nil
}

// environHas reports whether a /proc/PID/environ (NUL-separated
// KEY=VALUE entries) holds kv exactly.
func environHas(env []byte, kv string) bool {
	for e := range bytes.SplitSeq(env, []byte{0}) {
		if string(e) == kv {
			return true
		}
	}
	return false
}

// countSet counts the times that are not zero.
func countSet(ts []time.Time) int {
	n := 0
	for _, t := range ts {
		if !t.IsZero() {
			n++
		}
	}
	return n
}
