package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// quietContender is the scale scenario's quiet job (-scale-quiet d) on
// the case cas: every rank prints when it started and sleeps d, so the
// ranks end as apart as they started (on this bed, over the tens of
// seconds a launch of thousands takes) and the launcher's CPU after the
// last start is what a job's quiet time and its end cost it. Its rows:
// the launcher's CPU to the last start, after it, and whole.
func quietContender(cas string, launcher []string, width, size int, d, timeout time.Duration) (contender, []*Result) {
	tag := fmt.Sprintf("quiet job (every rank sleeps %v)", d)
	row := func(metric, note string) *Result {
		return &Result{Scenario: "scale", Case: cas, Metric: tag + ": " + metric, Unit: "ms", Launcher: lGangway, Kind: Info, Note: note}
	}
	start := row("launcher CPU to all ranks started (user+sys)", "/proc/PID/stat polled every 10 ms (10 ms ticks): the last read before the latest rank's start")
	after := row("launcher CPU after the last rank's start (the sleep and the ranks' ends)", "whole minus the above")
	whole := row("launcher CPU (user+sys)", "")
	var last int64
	argv := slices.Concat(launcher, []string{"--tree-width", strconv.Itoa(width), "--start-timeout", "10m", "-x", scaleTag + "=1",
		"sh", "-c", "echo gwbench quiet $(date +%s%N); exec sleep " + strconv.FormatFloat(d.Seconds(), 'f', -1, 64)})
	c := contender{
		name: cas + ", " + tag, kind: Ours, timeout: timeout + d, capture: true, hwm: true, giveUp: 1,
		argv: argv,
		run:  runTreeRanks,
		value: func(o outcome) (float64, error) {
			l, err := parseQuietRun(o.Stdout, size)
			if err := errors.Join(err, scaleLeftovers()); err != nil {
				return 0, err
			}
			last = l
			return float64(l-o.End.Add(-o.Took).UnixNano()) / 1e6, nil
		},
		after: func(o outcome) {
			s := cpuAt(o.CPUTrace, time.Unix(0, last))
			start.Values = append(start.Values, ms(s))
			after.Values = append(after.Values, ms(o.CPU-s))
			whole.Values = append(whole.Values, ms(o.CPU))
		},
	}
	return c, []*Result{start, after, whole}
}

// parseQuietRun reads the quiet job's output: one "gwbench quiet NS" a
// rank (when it started, CLOCK_REALTIME ns), size of them; it returns
// the latest.
func parseQuietRun(out string, size int) (int64, error) {
	var last int64
	n := 0
	for line := range strings.Lines(out) {
		i := strings.Index(line, "gwbench quiet ")
		if i < 0 {
			continue
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(line[i+len("gwbench quiet "):]), 10, 64)
		if err != nil || ns <= 0 {
			return 0, fmt.Errorf("quiet job: malformed line %q", strings.TrimSpace(line))
		}
		n++
		last = max(last, ns)
	}
	if n != size {
		return 0, fmt.Errorf("quiet job: %d of %d ranks said they started", n, size)
	}
	return last, nil
}
