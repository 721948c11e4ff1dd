package bench

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// untaggedRank is where AnalyzeFiles keeps samples of untagged lines until
// resolveUntagged decides whose they are.
const untaggedRank = -1

// ErrUntaggedRanks reports saved logs whose untagged lines hold several
// ranks' output that cannot be told apart (interleaved step lines without
// an end-of-run figure per rank).
var ErrUntaggedRanks = errors.New("untagged lines of several ranks")

// untaggedSum is a per-rank metric whose untagged lines held several
// end-of-run figures: each is taken as one rank's summary.
type untaggedSum struct {
	finals []point
	series int // ranks the step lines show at least (0: no step lines)
}

// resolveUntagged decides, per metric, whose the untagged samples are, and
// returns how many ranks they show (0 when none). A global metric's, and a
// per-rank metric's that look like one rank's (no step printed twice in a
// file, at most one end-of-run figure), go to rank 0 as before. Several
// end-of-run figures of a per-rank metric (several `total images/sec:`
// lines) are several ranks' summaries: they are summed (summedMetric).
// Anything else (interleaved steps and fewer than two end-of-run figures,
// or a per-rank metric in both tagged and untagged lines) cannot be
// attributed: an error wrapping ErrUntaggedRanks.
func (a *accum) resolveUntagged(paths []string) (int, error) {
	ranks := 0
	for _, name := range a.order {
		ma := a.metrics[name]
		u := ma.ranks[untaggedRank]
		if u == nil {
			continue
		}
		delete(ma.ranks, untaggedRank)
		series, where := seriesRanks(u.points, paths)
		switch {
		case ma.m.Scope == ScopeGlobal:
			a.toRankZero(ma, u)
		case len(ma.ranks) > 0:
			return 0, fmt.Errorf("%w: %s: both tagged and untagged lines (%s untagged): analyse the logs apart, or save them all with the launcher's -l (or mpirun --tag-output)",
				ErrUntaggedRanks, name, plural(len(u.points)+len(u.finals), "sample"))
		case series <= 1 && len(u.finals) <= 1:
			if len(u.points) > 1 && !slices.ContainsFunc(u.points, func(p point) bool { return p.step >= 0 }) {
				ma.notes = append(ma.notes, fmt.Sprintf("untagged lines without step numbers: taken as one rank's %d samples; "+
					"if several ranks printed them, the total is wrong (save logs with the launcher's -l, or mpirun --tag-output)", len(u.points)))
			}
			a.toRankZero(ma, u)
		case len(u.finals) >= 2:
			ma.summed = &untaggedSum{finals: u.finals, series: series}
			ranks = max(ranks, len(u.finals), series)
		default:
			return 0, fmt.Errorf("%w: %s: %s, and %s: cannot tell the ranks apart (save logs with the launcher's -l, or mpirun --tag-output)",
				ErrUntaggedRanks, name, where, plural(len(u.finals), "end-of-run figure"))
		}
	}
	return ranks, nil
}

// toRankZero gives untagged samples to rank 0, in source and line order
// with any rank 0 already has.
func (a *accum) toRankZero(ma *metricAcc, u *rankAcc) {
	r0 := ma.ranks[0]
	if r0 == nil {
		if len(a.rankHosts) > 0 {
			u.host = a.rankHosts[0]
		}
		ma.ranks[0] = u
		return
	}
	byPlace := func(x, y point) int { return cmp.Or(cmp.Compare(x.src, y.src), cmp.Compare(x.line, y.line)) }
	r0.points = append(r0.points, u.points...)
	slices.SortStableFunc(r0.points, byPlace)
	r0.finals = append(r0.finals, u.finals...)
	slices.SortStableFunc(r0.finals, byPlace)
}

// seriesRanks returns how many ranks' series the points hold at least:
// per source, the most times one step number occurs (a rank prints each
// step once), summed over the sources that have points. where says what
// showed it when that is more than one.
func seriesRanks(ps []point, paths []string) (n int, where string) {
	type key struct{ src, step int }
	count := map[key]int{}
	most := map[int]int{} // per source
	var worst key
	for _, p := range ps {
		most[p.src] = max(most[p.src], 1)
		if p.step < 0 {
			continue
		}
		k := key{p.src, p.step}
		count[k]++
		if count[k] > most[p.src] {
			most[p.src] = count[k]
		}
		if count[k] > count[worst] {
			worst = k
		}
	}
	for _, m := range most {
		n += m
	}
	switch {
	case count[worst] > 1:
		where = fmt.Sprintf("step %d printed %d times in %s", worst.step, count[worst], paths[worst.src])
	case len(most) > 1:
		where = fmt.Sprintf("step lines in %d files", len(most))
	}
	return n, where
}

// summedMetric fills mr for a metric whose untagged end-of-run figures are
// summed: no per-rank statistics, interval or stragglers.
func summedMetric(mr MetricReport, ma *metricAcc, o Options) MetricReport {
	s := ma.summed
	k := len(s.finals)
	mr.RanksReporting = k
	mr.RanksTotal = max(mr.RanksTotal, k)
	for _, p := range s.finals {
		mr.Value += p.value
		if p.at.IsZero() {
			mr.TimeAxis = AxisLine
		}
	}
	mr.Coverage = fmt.Sprintf("sum of %d untagged end-of-run figures", k)
	mr.Notes = append(mr.Notes, fmt.Sprintf("untagged lines: ranks cannot be told apart, so the total is the sum of the %d end-of-run figures, each taken as one rank's; no per-rank statistics, interval or stragglers (save logs with the launcher's -l, or mpirun --tag-output)", k))
	if s.series > k {
		mr.Notes = append(mr.Notes, fmt.Sprintf("the step lines show at least %d ranks, but only %d end-of-run figures: the total covers those only", s.series, k))
	}
	if o.BaselineIPS > 0 && ma.m.Images {
		e := mr.Value / (o.BaselineIPS * float64(k))
		mr.Efficiency = &e
	}
	return mr
}
