package main

import (
	"context"
	"time"
)

// contender is one launcher in a case: how to run it and what to read
// from a run.
type contender struct {
	name    string
	kind    Kind
	argv    []string
	env     []string
	capture bool // keep stdout for value and after
	hwm     bool // poll the launcher's VmHWM
	timeout time.Duration
	watch   func(pid int) (end func()) // cmdSpec.watch
	// value turns a successful run into the sample; nil means wall ms.
	value func(o outcome) (float64, error)
	// run replaces runTimed, for contenders that watch more than the
	// launcher (nil: runTimed).
	run func(ctx context.Context, s cmdSpec) outcome
	// before runs just before every run; after sees every successful
	// measured run (extra metrics).
	before func()
	after  func(o outcome)
	note   string
	// giveUp is how many failed runs without a success drop the
	// contender from the remaining rounds (0: 2).
	giveUp int
}

// caseSpec names the rows a set of contenders fills.
type caseSpec struct {
	scenario, name, metric, unit string
	higher                       bool
}

// interleave runs the contenders in rounds, each round once each in order
// (A B C A B C ...): warm-up rounds first, not counted, then the measured
// rounds. A contender that failed twice without a single success is
// dropped for the remaining rounds. It returns one Result per contender,
// in order, already added to the bench.
func (b *bench) interleave(ctx context.Context, c caseSpec, cs []contender) []*Result {
	res := make([]*Result, len(cs))
	for i, k := range cs {
		res[i] = b.add(&Result{Scenario: c.scenario, Case: c.name, Metric: c.metric, Unit: c.unit, Higher: c.higher, Launcher: k.name, Kind: k.kind, Note: k.note})
	}
	warm, runs := b.o.warmup, b.o.runs
	for round := -warm; round < runs; round++ {
		for i, k := range cs {
			if ctx.Err() != nil {
				return res
			}
			r := res[i]
			giveUp := k.giveUp
			if giveUp == 0 {
				giveUp = 2
			}
			if r.Failures >= giveUp && len(r.Values) == 0 {
				continue
			}
			timeout := k.timeout
			if timeout == 0 {
				timeout = 2 * time.Minute
			}
			if k.before != nil {
				k.before()
			}
			run := k.run
			if run == nil {
				run = runTimed
			}
			o := run(ctx, cmdSpec{argv: k.argv, env: k.env, capture: k.capture, hwm: k.hwm, timeout: timeout, watch: k.watch})
			v, err := o.Took.Seconds()*1000, o.Err
			if err == nil && k.value != nil {
				v, err = k.value(o)
			}
			if err != nil {
				if ctx.Err() != nil {
					return res
				}
				r.Failures++
				if r.Failures == 1 {
					b.progress("%s, %s: run failed: %v", c.name, k.name, err)
					r.Note = joinNote(r.Note, "failed: "+trim(err.Error(), 200))
				}
				continue
			}
			if round >= 0 {
				r.Values = append(r.Values, v)
				if k.after != nil {
					k.after(o)
				}
			}
		}
		if round >= 0 {
			b.logf("%s: round %d/%d done", c.name, round+1, runs)
		}
	}
	return res
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	if b == "" {
		return a
	}
	return a + "; " + b
}

func trim(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
