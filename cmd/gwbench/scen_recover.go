package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The scenario "rank failure to all ranks running again" (recover): how
// long after one rank fails the whole gang runs again, with
// --max-restarts 1 and --restart-backoff 0 so that the backoff (the
// user's choice, added as it is) stays out of the number.
//
// In the first attempt every rank but rank 1 starts a child and sleeps,
// reporting itself up with a file; rank 1 waits until gwbench has seen
// every rank up, writes its CLOCK_REALTIME and exits 3. In the second
// attempt (TORCHELASTIC_RESTART_COUNT=1) every rank writes its
// CLOCK_REALTIME and exits 0. The sample runs from the failure to the
// last rank of the second attempt writing its time.
//
// "lost host to all ranks running again on a spare": the same on 16
// hosts x 8 with a 17th host as the spare (--spares 1); no rank fails:
// once every rank is up gwbench SIGKILLs host 1's agent, as a node crash
// ends it, and the sample runs from the kill to the last rank of the
// second attempt (on hosts 0 and 2-16) writing its time. gwbench starts
// host 1's agent again after each run.
//
// No peer is measured: mpirun and Hydra do not restart a job, and
// torchrun's elastic agent (the peer that does) is not set up on the
// bench's hosts.

const (
	recoverMetric = "rank failure to all ranks running again"
	lostMetric    = "lost host to all ranks running again on a spare"
	recoverVar    = "GWBENCH_RECOVER"
)

const recoverRank = `#!/bin/sh
# recover rank: written by gwbench (cmd/gwbench/scen_recover.go).
d=$1
r=${OMPI_COMM_WORLD_RANK:-$PMI_RANK}
a=${TORCHELASTIC_RESTART_COUNT:-0}
if [ "$a" != 0 ]; then date +%s.%N >"$d/again/$r"; exit 0; fi
` + rankSleepOrFail

// recover runs the scenario on every host of the bed, at 1 and at 8
// ranks per host.
func (b *bench) recover(ctx context.Context) error {
	e := b.net
	dir := filepath.Join(b.dir, "recover")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	script := filepath.Join(dir, "rank")
	if err := os.WriteFile(script, []byte(recoverRank), 0o755); err != nil {
		return err
	}
	run := filepath.Join(dir, "run")
	tag := fmt.Sprintf("gwbench-recover-%d", os.Getpid())
	hosts := e.jobHosts()
	if err := b.recoverLost(ctx, script, run, tag, hosts); err != nil {
		return err
	}
	for _, per := range []int{1, 8} {
		j := jobSpec{Hosts: hosts, PerHost: per, Argv: []string{"/usr/bin/env", recoverVar + "=" + tag, script, run, strconv.Itoa(failRank)}}
		r := &recoverRun{dir: run, tag: recoverVar + "=" + tag, np: j.np()}
		argv := withFlag(withFlag(e.gangway(j), "--restart-backoff=0"), "--max-restarts=1")
		c := contender{name: lGangway, kind: Ours, argv: argv, run: r.run, timeout: 2 * time.Minute,
			value: func(outcome) (float64, error) { return ms(r.last), nil },
			note:  "--max-restarts 1 --restart-backoff 0: the backoff is not in the number (add yours); no peer restarts a job here"}
		name := fmt.Sprintf("%d hosts x %d, rank %d exits 3, the gang restarts once", hosts, per, failRank)
		b.progress("recover: %s (%d+%d rounds)", name, b.o.warmup, b.o.runs)
		b.interleave(ctx, caseSpec{scenario: "recover", name: name, metric: recoverMetric, unit: "ms"}, []contender{c})
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// recoverLost is the lost-host case: 16 hosts x 8 and a 17th as the
// spare, host 1's agent killed once every rank is up.
func (b *bench) recoverLost(ctx context.Context, script, run, tag string, hosts int) error {
	e := b.net
	if len(e.hosts) <= hosts {
		b.skip("recover: lost host: no spare host in the bed")
		return nil
	}
	j := jobSpec{Hosts: hosts + 1, PerHost: 8, NP: hosts * 8, Argv: []string{"/usr/bin/env", recoverVar + "=" + tag, script, run, "-1"}}
	r := &recoverRun{dir: run, tag: recoverVar + "=" + tag, np: j.np(), crash: func() (time.Time, error) {
		t := time.Now()
		return t, syscall.Kill(e.agentPd[1], syscall.SIGKILL)
	}, revive: func(ctx context.Context) error {
		if err := e.startAgent(ctx, 1); err != nil {
			return err
		}
		return e.waitAgent(ctx, 1)
	}}
	argv := withFlag(withFlag(withFlag(e.gangway(j), "--restart-backoff=0"), "--max-restarts=1"), "--spares=1")
	c := contender{name: lGangway, kind: Ours, argv: argv, run: r.run, timeout: 2 * time.Minute,
		value: func(outcome) (float64, error) { return ms(r.last), nil },
		note:  "host 1's agent SIGKILLed once every rank is up; --spares 1 --max-restarts 1 --restart-backoff 0"}
	name := fmt.Sprintf("%d hosts x 8 + 1 spare, host 1's agent killed", hosts)
	b.progress("recover: %s (%d+%d rounds)", name, b.o.warmup, b.o.runs)
	b.interleave(ctx, caseSpec{scenario: "recover", name: name, metric: lostMetric, unit: "ms"}, []contender{c})
	return ctx.Err()
}

// recoverRun is gangway's runs in one case.
type recoverRun struct {
	dir, tag string
	np       int
	last     time.Duration // the run just done
	// crash, when set, is the failure: called once every rank is up
	// (in place of letting rank 1 fail), it returns when it struck.
	crash func() (time.Time, error)
	// revive undoes crash after the run.
	revive func(ctx context.Context) error
}

// run is one run: the launcher, and beside it the watch that lets rank 1
// fail once every rank of the first attempt is up.
func (r *recoverRun) run(ctx context.Context, s cmdSpec) outcome {
	r.last = 0
	if err := os.RemoveAll(r.dir); err != nil {
		return outcome{Err: err}
	}
	for _, d := range []string{"up", "again"} {
		if err := os.MkdirAll(filepath.Join(r.dir, d), 0o755); err != nil {
			return outcome{Err: err}
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	exited := make(chan struct{})
	var werr error
	var struck time.Time
	var wg sync.WaitGroup
	wg.Go(func() { struck, werr = r.watch(ctx, exited) })
	o := runTimed(ctx, s)
	close(exited)
	wg.Wait()
	if r.revive != nil {
		if err := r.revive(context.WithoutCancel(ctx)); err != nil {
			o.Err = errors.Join(o.Err, fmt.Errorf("starting the killed agent again: %w", err))
			return o
		}
	}
	if left, err := sweep(r.tag); err != nil || left > 0 {
		o.Err = errors.Join(o.Err, err, fmt.Errorf("%d processes of the job still ran after the launcher returned (gwbench killed them)", left))
		return o
	}
	if o.Err != nil || werr != nil {
		o.Err = errors.Join(o.Err, werr)
		return o
	}
	failed := struck
	if r.crash == nil {
		raw, err := os.ReadFile(filepath.Join(r.dir, "failed"))
		if err != nil {
			o.Err = fmt.Errorf("rank %d left no timestamp: %w", failRank, err)
			return o
		}
		if failed, err = parseStamp(string(raw)); err != nil {
			o.Err = err
			return o
		}
	}
	last, n, err := latestStamp(filepath.Join(r.dir, "again"))
	switch {
	case err != nil:
		o.Err = err
	case n != r.np:
		o.Err = fmt.Errorf("%d of %d ranks ran in the second attempt", n, r.np)
	case last.Before(failed):
		o.Err = errors.New("the second attempt's ranks ran before the failure")
	default:
		r.last = last.Sub(failed)
	}
	return o
}

// watch lets the failing rank go, or crashes a host, once every rank of
// the first attempt is up, and says when a crash struck; the launcher
// returning first is an error.
func (r *recoverRun) watch(ctx context.Context, exited <-chan struct{}) (time.Time, error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	by := time.Now().Add(failUpBy)
	for {
		ents, _ := os.ReadDir(filepath.Join(r.dir, "up"))
		if len(ents) >= r.np {
			if r.crash != nil {
				return r.crash()
			}
			return time.Time{}, os.WriteFile(filepath.Join(r.dir, "go"), nil, 0o644)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, context.Cause(ctx)
		case <-exited:
			return time.Time{}, fmt.Errorf("the launcher returned with %d of %d ranks up", len(ents), r.np)
		case now := <-t.C:
			if now.After(by) {
				return time.Time{}, fmt.Errorf("%d of %d ranks up after %v", len(ents), r.np, failUpBy)
			}
		}
	}
}

// latestStamp reads every file in dir as a timestamp and returns the
// latest and how many there were.
func latestStamp(dir string) (time.Time, int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return time.Time{}, 0, err
	}
	var last time.Time
	for _, e := range ents {
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return time.Time{}, 0, err
		}
		st, err := parseStamp(string(raw))
		if err != nil {
			return time.Time{}, 0, fmt.Errorf("%s: %w", e.Name(), err)
		}
		if st.After(last) {
			last = st
		}
	}
	return last, len(ents), nil
}
