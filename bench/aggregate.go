package bench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// report aggregates everything in a into a Report. o must be normalised.
func (a *accum) report(o Options, meta Meta, lines LineStats) Report {
	rep := Report{
		Schema: SchemaID,
		Meta:   meta,
		Options: ReportOptions{
			WarmupSteps:        o.WarmupSteps,
			StragglerThreshold: o.StragglerThreshold,
			BaselineIPS:        o.BaselineIPS,
			CustomMetrics:      []string{},
		},
		Lines:   lines,
		Metrics: []MetricReport{},
	}
	for _, r := range o.Metrics {
		for _, m := range r.Metrics() {
			rep.Options.CustomMetrics = append(rep.Options.CustomMetrics, m.Name)
		}
	}
	if rep.Meta.Command == nil {
		rep.Meta.Command = []string{}
	}
	if rep.Meta.Hosts == nil {
		rep.Meta.Hosts = []string{}
	}
	origin := meta.Start
	if origin.IsZero() || (!a.first.IsZero() && a.first.Before(origin)) {
		origin = a.first
	}
	total := max(meta.Ranks, len(a.rankHosts), a.maxRank+1)
	for _, name := range a.order {
		rep.Metrics = append(rep.Metrics, buildMetric(a.metrics[name], o, origin, total))
	}
	// Per-rank metrics first: they are what the job total is about.
	slices.SortStableFunc(rep.Metrics, func(x, y MetricReport) int {
		return cmp.Compare(scopeOrder(x.Scope), scopeOrder(y.Scope))
	})
	return rep
}

func scopeOrder(s string) int {
	if s == "rank" {
		return 0
	}
	return 1
}

func buildMetric(ma *metricAcc, o Options, origin time.Time, total int) MetricReport {
	m := ma.m
	mr := MetricReport{
		Name: m.Name, Unit: m.Unit, Scope: m.Scope.String(),
		RanksTotal: total, SourceRank: -1, TimeAxis: AxisSeconds,
		Stragglers: []Outlier{}, Notes: []string{}, Hosts: []HostReport{}, Ranks: []RankReport{},
	}
	if m.Note != "" {
		mr.Notes = append(mr.Notes, m.Note)
	}
	mr.Notes = append(mr.Notes, ma.notes...)
	if ma.summed != nil {
		return summedMetric(mr, ma, o)
	}
	ranks := sortedKeys(ma.ranks)
	for _, r := range ranks {
		ra := ma.ranks[r]
		for _, p := range append(ra.points[:len(ra.points):len(ra.points)], ra.finals...) {
			if p.at.IsZero() {
				mr.TimeAxis = AxisLine
			}
		}
	}
	var reporting []RankReport
	for _, r := range ranks {
		rr := rankStats(r, ma.ranks[r], o, m, mr.TimeAxis, origin)
		mr.Ranks = append(mr.Ranks, rr)
		if rr.N > 0 || rr.Final != nil {
			reporting = append(reporting, rr)
		} else {
			mr.Notes = append(mr.Notes, fmt.Sprintf("rank %d: all %d samples fell in the warm-up", r, rr.Warmup))
		}
	}
	mr.RanksReporting = len(reporting)
	if len(reporting) == 0 {
		mr.Coverage = fmt.Sprintf("measured on 0 of %d ranks", total)
		return mr
	}
	if m.Scope == ScopeGlobal {
		globalValue(&mr, reporting)
	} else {
		rankTotal(&mr, reporting, o.StragglerThreshold)
	}
	if o.BaselineIPS > 0 && m.Images {
		n := len(reporting)
		if m.Scope == ScopeGlobal {
			n = total
			mr.Notes = append(mr.Notes, fmt.Sprintf("efficiency assumes all %d ranks contributed to this global figure", total))
		}
		e := mr.Value / (o.BaselineIPS * float64(n))
		mr.Efficiency = &e
	}
	return mr
}

// rankStats computes one rank's statistics, warm-up excluded.
func rankStats(rank int, ra *rankAcc, o Options, m *Metric, axis string, origin time.Time) RankReport {
	rr := RankReport{Rank: rank, Host: ra.host, Series: make([]Point, 0, len(ra.points))}
	cut := warmupCut(ra.points, o.WarmupSteps, m.ToolWarmup)
	vals := make([]float64, 0, len(ra.points)-cut)
	for i, p := range ra.points {
		rr.Series = append(rr.Series, Point{T: axisValue(p, axis, origin), Step: p.step, Value: p.value, Warmup: i < cut})
		if i >= cut {
			vals = append(vals, p.value)
		}
	}
	rr.N, rr.Warmup = len(vals), cut
	if len(ra.finals) > 0 {
		f := ra.finals[len(ra.finals)-1].value
		rr.Final = &f
	}
	if len(vals) > 0 {
		rr.Mean, rr.StdDev, rr.CI95 = describe(vals)
	} else if rr.Final != nil {
		rr.Mean = *rr.Final
	}
	return rr
}

func axisValue(p point, axis string, origin time.Time) float64 {
	if axis == AxisLine {
		return float64(p.line)
	}
	return p.at.Sub(origin).Seconds()
}

// warmupCut returns how many leading points of one rank are warm-up.
func warmupCut(ps []point, steps int, toolWarmup bool) int {
	n := len(ps)
	if steps < 0 {
		if toolWarmup {
			return 0
		}
		return n / 10
	}
	increasing := n > 0 && ps[0].step >= 0
	for i := 1; i < n && increasing; i++ {
		increasing = ps[i].step > ps[i-1].step
	}
	if !increasing {
		return min(steps, n)
	}
	c := 0
	for c < n && ps[c].step < ps[0].step+steps {
		c++
	}
	return c
}

// describe returns the mean, the sample standard deviation and the
// half-width of the 95% Student-t confidence interval of the mean (nil for
// fewer than two values).
func describe(vals []float64) (mean, sd float64, ci *float64) {
	if len(vals) < 2 {
		return vals[0], 0, nil
	}
	mean, sd = stat.MeanStdDev(vals, nil)
	n := float64(len(vals))
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: n - 1}.Quantile(0.975)
	hw := t * sd / math.Sqrt(n)
	return mean, sd, &hw
}

// rankTotal sums per-rank means and finds hosts, the slowest and stragglers.
func rankTotal(mr *MetricReport, reporting []RankReport, threshold float64) {
	k := len(reporting)
	mr.Coverage = fmt.Sprintf("measured on %d of %d ranks", k, mr.RanksTotal)
	if k < mr.RanksTotal {
		mr.Notes = append(mr.Notes, fmt.Sprintf("only %d of %d ranks printed %s: the total covers those ranks only", k, mr.RanksTotal, mr.Name))
	}
	mr.Value, mr.CI95 = sumWithCI(reporting)
	if mr.CI95 == nil {
		mr.Notes = append(mr.Notes, "no interval for the total: some rank has fewer than 2 samples")
	}
	var order []string
	members := map[string][]RankReport{}
	for _, rr := range reporting {
		if members[rr.Host] == nil {
			order = append(order, rr.Host)
		}
		members[rr.Host] = append(members[rr.Host], rr)
	}
	for _, host := range order {
		h := HostReport{Host: host, Ranks: []int{}}
		for _, rr := range members[host] {
			h.Ranks = append(h.Ranks, rr.Rank)
		}
		h.Total, h.CI95 = sumWithCI(members[host])
		h.PerRank = h.Total / float64(len(h.Ranks))
		mr.Hosts = append(mr.Hosts, h)
	}
	if k < 2 {
		return
	}
	means := make([]float64, k)
	for i, rr := range reporting {
		means[i] = rr.Mean
	}
	med := Median(means)
	mr.MedianRank = med
	slow := slices.MinFunc(reporting, func(x, y RankReport) int { return cmp.Compare(x.Mean, y.Mean) })
	mr.SlowestRank = &Outlier{Rank: slow.Rank, Host: slow.Host, Value: slow.Mean, DeviationPct: pct(slow.Mean, med)}
	for _, rr := range reporting {
		if med > 0 && rr.Mean < med*(1-threshold) {
			mr.Stragglers = append(mr.Stragglers, Outlier{Rank: rr.Rank, Host: rr.Host, Value: rr.Mean, DeviationPct: pct(rr.Mean, med)})
		}
	}
	if len(mr.Hosts) < 2 {
		return
	}
	per := make([]float64, len(mr.Hosts))
	for i, h := range mr.Hosts {
		per[i] = h.PerRank
	}
	hmed := Median(per)
	sh := slices.MinFunc(mr.Hosts, func(x, y HostReport) int { return cmp.Compare(x.PerRank, y.PerRank) })
	mr.SlowestHost = &Outlier{Rank: -1, Host: sh.Host, Value: sh.PerRank, DeviationPct: pct(sh.PerRank, hmed)}
}

// sumWithCI sums the ranks' means; the interval of the sum is the root of
// the summed squared half-widths (independent ranks), nil if any is missing.
func sumWithCI(rrs []RankReport) (float64, *float64) {
	sum, sq, ok := 0.0, 0.0, true
	for _, rr := range rrs {
		sum += rr.Mean
		if rr.CI95 == nil {
			ok = false
		} else {
			sq += *rr.CI95 * *rr.CI95
		}
	}
	if !ok {
		return sum, nil
	}
	ci := math.Sqrt(sq)
	return sum, &ci
}

// globalValue reports a global metric from the lowest rank that printed it.
func globalValue(mr *MetricReport, reporting []RankReport) {
	src := reporting[0]
	mr.SourceRank = src.Rank
	mr.Coverage = fmt.Sprintf("printed by rank %d", src.Rank)
	if len(reporting) > 1 {
		others := make([]string, 0, len(reporting)-1)
		for _, rr := range reporting[1:] {
			others = append(others, fmt.Sprint(rr.Rank))
		}
		mr.Notes = append(mr.Notes, fmt.Sprintf("global figure also printed by ranks %s: using rank %d's, not summed",
			strings.Join(others, ","), src.Rank))
	}
	if src.Final != nil {
		mr.Value = *src.Final
		mr.Notes = append(mr.Notes, "value is the tool's own end-of-run figure")
		return
	}
	mr.Value, mr.CI95 = src.Mean, src.CI95
	mr.Notes = append(mr.Notes, fmt.Sprintf("value is the mean of %d samples (the tool printed no end-of-run figure)", src.N))
}

// Median of vals (not modified); the mean of the middle two for even counts.
func Median(vals []float64) float64 {
	s := slices.Clone(vals)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func pct(v, med float64) float64 {
	if med == 0 {
		return 0
	}
	return (v - med) / med * 100
}

func sortedKeys[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
