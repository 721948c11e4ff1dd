package main

import (
	"fmt"
	"strings"
)

// find returns the first result of scenario whose case contains cas,
// whose metric starts with metric, run by launcher.
func find(rs []*Result, scenario, cas, metric, launcher string) *Result {
	for _, r := range rs {
		if r.Scenario == scenario && strings.Contains(r.Case, cas) && strings.HasPrefix(r.Metric, metric) && r.Launcher == launcher && r.N > 0 {
			return r
		}
	}
	return nil
}

// findWall is find for a case's wall-time row (the one without a metric),
// not the CPU rows of the same launcher beside it.
func findWall(rs []*Result, scenario, cas, launcher string) *Result {
	for _, r := range rs {
		if r.Scenario == scenario && strings.Contains(r.Case, cas) && r.Metric == "" && r.Launcher == launcher && r.N > 0 {
			return r
		}
	}
	return nil
}

func notMeasured(name, goal string) Target {
	return Target{Name: name, Goal: goal, Measured: "-", Status: "not measured"}
}

func status(hit bool) string {
	if hit {
		return "hit"
	}
	return "missed"
}

// atMost is a target "value <= limit": hit or missed, and by how much.
func atMost(t Target, v, limit float64) Target {
	t.Status = status(v <= limit)
	if v > limit {
		t.By = fmt.Sprintf("%.2fx the limit", v/limit)
	}
	return t
}

// vsRow is a target "r's median <= limit x vs's", ratio precomputed.
func vsRow(name, goal string, r *Result, ratio float64, vs string, limit float64) Target {
	t := Target{Name: name, Goal: goal, Measured: fmt.Sprintf("%s %s = %s %s", fmtNum(r.Median), r.Unit, fmtRatio(ratio), vs)}
	return atMost(t, ratio, limit)
}

// targets evaluates the bench's performance targets against the results
// (fillRatios must have run). scaleCounts are the host counts the scale
// scenario was asked for, smallest first.
func targets(rs []*Result, scaleCounts []int) []Target {
	var ts []Target
	ts = append(ts, pmiTargets(rs)...)
	ts = append(ts, launchTargets(rs)...)
	ts = append(ts, failstopTargets(rs)...)
	ts = append(ts, recoverTarget(rs), lostTarget(rs))
	ts = append(ts, scaleTargets(rs, scaleCounts)...)
	ts = append(ts, treeTargets(rs, scaleCounts)...)
	ts = append(ts, outputTarget(rs))
	ts = append(ts, slurmTargets(rs)...)
	ts = append(ts, agentRSSTarget(rs))
	return ts
}

// pmiTargets: the empty PMI-1 barrier at most 0.8x Hydra's, MPI_Init +
// MPI_Finalize no slower than under Hydra, at 16 and 64 ranks (-quick
// runs 16 only).
func pmiTargets(rs []*Result) []Target {
	var ts []Target
	for _, np := range []string{"16 ranks", "64 ranks"} {
		name, goal := "PMI barrier, "+np+" on 16 hosts", "<= 0.8x "+lHydra
		g, h := find(rs, "pmi", np, "empty PMI", lGangway), find(rs, "pmi", np, "empty PMI", lHydra)
		if g != nil && h != nil {
			ts = append(ts, vsRow(name, goal, g, Ratio(g.Median, h.Median), lHydra, 0.8))
		} else {
			ts = append(ts, notMeasured(name, goal))
		}
	}
	for _, np := range []string{"16 ranks", "64 ranks"} {
		name, goal := "MPI_Init+MPI_Finalize, "+np, "<= 1x "+lHydra
		g, h := find(rs, "pmi", np, "MPI_Init", lGangway), find(rs, "pmi", np, "MPI_Init", lHydra)
		if g != nil && h != nil {
			ts = append(ts, vsRow(name, goal, g, Ratio(g.Median, h.Median), lHydra, 1))
		} else {
			ts = append(ts, notMeasured(name, goal))
		}
	}
	return ts
}

// launchTargets: 16 hosts x 8 ranks, cold over stock sshd and warm
// (agents running), against the fastest peer measured; and what the
// agents themselves spend on a launch.
func launchTargets(rs []*Result) []Target {
	var ts []Target
	const hosts = 16
	{
		name, goal := "cold launch 16x8 over sshd (--transport ssh)", "<= 0.9x the fastest peer"
		if r := findWall(rs, "launch", "16 hosts", lGangwayCold); r != nil && r.Ratio > 0 {
			ts = append(ts, vsRow(name, goal, r, r.Ratio, r.RatioVs, 0.9))
		} else {
			ts = append(ts, notMeasured(name, goal))
		}
	}
	{
		name, goal := "warm launch 16x8 (agents running)", "<= 0.3x the fastest peer"
		if r := findWall(rs, "launch", "16 hosts", lGangway); r != nil && r.Ratio > 0 {
			ts = append(ts, vsRow(name, goal, r, r.Ratio, r.RatioVs, 0.3))
		} else {
			ts = append(ts, notMeasured(name, goal))
		}
	}
	{
		name, goal := "agents' CPU per warm launch 16x8", "<= 5 ms per host (agents' utime+stime sum / 16; 10 ms ticks)"
		if r := find(rs, "launch", "16 hosts", "CPU of the agents", lGangway); r != nil {
			per := r.Median / hosts
			t := Target{Name: name, Goal: goal, Measured: fmt.Sprintf("%s ms / %d hosts = %s ms per host", fmtNum(r.Median), hosts, fmtNum(per))}
			ts = append(ts, atMost(t, per, 5))
		} else {
			ts = append(ts, notMeasured(name, goal))
		}
	}
	return ts
}

// failstopTargets: from a rank's failure until every rank on every host
// is gone and the launcher has returned, no slower than the fastest peer
// that stopped the job, at 1 and at 8 ranks per host on 16 hosts.
func failstopTargets(rs []*Result) []Target {
	var ts []Target
	for _, per := range []int{1, 8} {
		cas := failCase(16, per)
		name, goal := fmt.Sprintf("rank failure to all stopped, 16 hosts x %d", per), "<= 1x the fastest peer"
		switch r := find(rs, "failstop", cas, failMetric, lGangway); {
		case r != nil && r.Ratio > 0:
			ts = append(ts, vsRow(name, goal, r, r.Ratio, r.RatioVs, 1))
		case r != nil:
			t := notMeasured(name, goal)
			t.Measured = fmt.Sprintf("%s %s; no peer stopped the job", fmtNum(r.Median), r.Unit)
			ts = append(ts, t)
		default:
			ts = append(ts, notMeasured(name, goal))
		}
	}
	return ts
}

// scaleTargets: the launcher's own cost per host in the scale scenario,
// evaluated at the largest host count measured (1024 in a full run).
// CPU is CPU(N)/N: the fixed part (start-up, keys) is small beside N
// handshakes. RSS per host is the marginal cost (RSS(N) - RSS(lo)) /
// (N - lo): a flat fan-out's memory is a fixed base (Go runtime, binary)
// plus a part per connection, and only the second is "per host".
func scaleTargets(rs []*Result, scaleCounts []int) []Target {
	const full = 1024
	cpuName, cpuGoal := "scale: launcher CPU per host", fmt.Sprintf("<= 0.5 ms per host at %d hosts (CPU(N) / N)", full)
	rssName, rssGoal := "scale: launcher peak RSS per host", fmt.Sprintf("<= 64 KiB per host at %d hosts (marginal: (RSS(N) - RSS(lo)) / (N - lo))", full)
	metric := func(n int, m string) *Result { return find(rs, "scale", scaleCase(n, 0), m, lGangway) }
	var got []int // counts with both rows, ascending
	for _, n := range scaleCounts {
		if metric(n, "launcher CPU") != nil && metric(n, "launcher peak RSS") != nil {
			got = append(got, n)
		}
	}
	if len(got) == 0 {
		return []Target{notMeasured(cpuName, cpuGoal), notMeasured(rssName, rssGoal)}
	}
	lo, hi := got[0], got[len(got)-1]
	indicative := func(t Target) Target {
		if hi != full {
			t.Status = "indicative (" + t.Status + ")"
		}
		return t
	}
	at := fmt.Sprintf(" at %d hosts", hi)
	cl, ch := metric(lo, "launcher CPU"), metric(hi, "launcher CPU")
	cpu := Target{Name: cpuName + at, Goal: cpuGoal, Measured: fmt.Sprintf("%s ms / %d = %s ms per host", fmtNum(ch.Median), hi, fmtNum(ch.Median/float64(hi)))}
	if lo < hi {
		cpu.Measured += fmt.Sprintf(" (marginal %d->%d: %s ms per host)", lo, hi, fmtNum((ch.Median-cl.Median)/float64(hi-lo)))
	}
	cpu = indicative(atMost(cpu, ch.Median/float64(hi), 0.5))

	ml, mh := metric(lo, "launcher peak RSS"), metric(hi, "launcher peak RSS")
	const kib = 1024.0                   // KiB per MiB
	avg := mh.Median * kib / float64(hi) // KiB per host, base included
	rss := Target{Name: rssName + at, Goal: rssGoal}
	perHost := avg
	if lo < hi {
		perHost = (mh.Median - ml.Median) * kib / float64(hi-lo)
		rss.Measured = fmt.Sprintf("%s MiB at %d, %s MiB at %d: %s KiB per host marginal (RSS/N %s KiB)", fmtNum(mh.Median), hi, fmtNum(ml.Median), lo, fmtNum(perHost), fmtNum(avg))
	} else {
		rss.Measured = fmt.Sprintf("%s MiB at %d: %s KiB per host (RSS/N: one count only, no marginal)", fmtNum(mh.Median), hi, fmtNum(avg))
	}
	rss = indicative(atMost(rss, perHost, 64))
	return []Target{cpu, rss}
}

// outputTarget: the tagged pair (gangway -l against Hydra -prepend-rank,
// the same work) must reach 0.4x the local-pipe floor with no line lost
// or mangled; the untagged pair is shown beside it.
func outputTarget(rs []*Result) Target {
	name, goal := "output throughput, tagged (-l)", ">= 0.4x local pipes, 0 lines lost or mangled; vs "+lHydraTag
	r := find(rs, "output", "", "throughput", lGangway)
	f := find(rs, "output", "", "throughput", lPipes)
	if r == nil || f == nil {
		return notMeasured(name, goal)
	}
	rf := r.Median / f.Median
	t := Target{Name: name, Goal: goal, Measured: fmt.Sprintf("%s MiB/s = %.2fx pipes", fmtNum(r.Median), rf)}
	if h := find(rs, "output", "", "throughput", lHydraTag); h != nil {
		t.Measured += fmt.Sprintf(", %.2fx %s", r.Median/h.Median, lHydraTag)
	}
	bad := -1.0 // not verified
	if chk := find(rs, "output", "", "lines lost", lGangway); chk != nil {
		bad = chk.Median
	}
	t.Measured += fmt.Sprintf(", %s bad lines", badCell(bad))
	// The untagged pair, beside it.
	badRaw := 0.0
	if u := find(rs, "output", "", "throughput", lGangwayRaw); u != nil {
		t.Measured += fmt.Sprintf("; untagged %s MiB/s = %.2fx pipes", fmtNum(u.Median), u.Median/f.Median)
		if h := find(rs, "output", "", "throughput", lHydra); h != nil {
			t.Measured += fmt.Sprintf(", %.2fx %s", u.Median/h.Median, lHydra)
		}
		badRaw = -1
		if chk := find(rs, "output", "", "lines lost", lGangwayRaw); chk != nil {
			badRaw = chk.Median
		}
		t.Measured += fmt.Sprintf(", %s bad lines", badCell(badRaw))
	}
	t.Status = status(rf >= 0.4 && bad == 0 && badRaw == 0)
	var by []string
	if rf < 0.4 {
		by = append(by, fmt.Sprintf("%.0f%% short of 0.4x pipes", (1-rf/0.4)*100))
	}
	by = append(by, badBy("tagged", bad)...)
	by = append(by, badBy("untagged", badRaw)...)
	t.By = strings.Join(by, ", ")
	return t
}

// badBy says how the verifier's count v misses "0 lines lost or
// mangled"; -1 is "not verified".
func badBy(which string, v float64) []string {
	switch {
	case v < 0:
		return []string{which + " output not verified"}
	case v > 0:
		return []string{fmt.Sprintf("%.0f %s lines lost or mangled", v, which)}
	}
	return nil
}

func badCell(v float64) string {
	if v < 0 {
		return "unverified"
	}
	return fmt.Sprintf("%.0f", v)
}

// slurmTargets: gangway over srun must cost no more than srun launching
// the ranks itself.
func slurmTargets(rs []*Result) []Target {
	var ts []Target
	for _, c := range []struct{ name, cas, metric string }{
		{"Slurm launch 3 nodes x 8, in one allocation", "/bin/true", ""},
		{"Slurm PMI barrier, 24 ranks on 3 nodes", "MPICH", "empty PMI"},
	} {
		goal := "no slower than " + lSrun
		if r := find(rs, "slurm", c.cas, c.metric, lGangway); r != nil && r.Ratio > 0 {
			t := Target{Name: c.name, Goal: goal, Measured: fmt.Sprintf("%s %s = %s %s", fmtNum(r.Median), r.Unit, fmtRatio(r.Ratio), r.RatioVs), Status: status(r.Ratio <= 1)}
			if r.Ratio > 1 {
				t.By = fmt.Sprintf("%.0f%% slower", (r.Ratio-1)*100)
			}
			ts = append(ts, t)
		} else {
			ts = append(ts, notMeasured(c.name, goal))
		}
	}
	return ts
}

func agentRSSTarget(rs []*Result) Target {
	name, goal := "agent RSS, 8 running ranks", "< 30 MiB"
	r := find(rs, "memory", "8 running", "VmRSS", "agent")
	if r == nil {
		return notMeasured(name, goal)
	}
	t := Target{Name: name, Goal: goal, Measured: fmt.Sprintf("%s MiB", fmtNum(r.Max)), Status: status(r.Max < 30)}
	if r.Max >= 30 {
		t.By = fmt.Sprintf("%s MiB over", fmtNum(r.Max-30))
	}
	return t
}

// recoverTarget: from a rank's failure until every rank of the restarted
// gang runs, under 2 s on 16 hosts x 8 (the backoff, 0 in the run, comes
// on top).
func recoverTarget(rs []*Result) Target {
	return recoveryTarget(rs, "rank failure to all ranks running again, 16 hosts x 8", "16 hosts x 8,", recoverMetric)
}

// lostTarget: from a host's agent being killed until every rank of the
// next attempt runs, a spare in its place, under 2 s on 16 hosts x 8.
func lostTarget(rs []*Result) Target {
	return recoveryTarget(rs, "lost host to all ranks running again on a spare, 16 hosts x 8", "16 hosts x 8 + 1 spare", lostMetric)
}

// recoveryTarget holds one recover row's median under 2 s.
func recoveryTarget(rs []*Result, name, cas, metric string) Target {
	goal := "< 2000 ms plus --restart-backoff"
	r := find(rs, "recover", cas, metric, lGangway)
	if r == nil {
		return notMeasured(name, goal)
	}
	t := Target{Name: name, Goal: goal, Measured: fmt.Sprintf("%s ms (backoff 0)", fmtNum(r.Median))}
	return atMost(t, r.Median, 2000)
}

// treeTargets: through the agent tree (--tree-width 32) the largest
// count completes correctly (every run: every rank once with its
// environment, one barrier across all, nothing left), and the
// launcher's CPU and peak RSS grow at most 10% from 1024 hosts to it.
func treeTargets(rs []*Result, scaleCounts []int) []Target {
	hi := scaleCounts[len(scaleCounts)-1]
	row := func(n int, metric string) *Result {
		for _, r := range rs {
			if r.Scenario == "scale" && r.Case == scaleCase(n, scaleWidth) && strings.HasPrefix(r.Metric, metric) {
				return r
			}
		}
		return nil
	}
	okName, okGoal := fmt.Sprintf("tree: %d hosts complete correctly", hi), "every run: all ranks started with RANK/WORLD_SIZE/PMI_RANK right, a barrier across all, all stopped, nothing left"
	var ok Target
	switch r := row(hi, "all ranks started"); {
	case r == nil:
		ok = notMeasured(okName, okGoal)
	case r.Failures > 0 || r.N == 0:
		ok = Target{Name: okName, Goal: okGoal, Measured: fmt.Sprintf("%d of %d runs failed", r.Failures, r.Failures+r.N), Status: "missed", By: trim(r.Note, 120)}
	default:
		ok = Target{Name: okName, Goal: okGoal, Measured: fmt.Sprintf("%d of %d runs; all ranks started in %s ms (median)", r.N, r.N, fmtNum(r.Median)), Status: "hit"}
	}
	ts := []Target{ok}
	const lo = 1024
	for _, m := range []struct{ metric, name string }{{"launcher CPU", "tree: launcher CPU"}, {"launcher peak RSS", "tree: launcher peak RSS"}} {
		name, goal := fmt.Sprintf("%s, %d -> %d hosts", m.name, lo, hi), "within 10% (median at N / median at 1024)"
		a, b := row(lo, m.metric), row(hi, m.metric)
		if a == nil || b == nil || a.N == 0 || b.N == 0 || hi == lo {
			ts = append(ts, notMeasured(name, goal))
			continue
		}
		t := Target{Name: name, Goal: goal, Measured: fmt.Sprintf("%s -> %s %s = %.2fx", fmtNum(a.Median), fmtNum(b.Median), a.Unit, b.Median/a.Median)}
		ts = append(ts, atMost(t, b.Median/a.Median, 1.1))
	}
	return ts
}
