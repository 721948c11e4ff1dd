package bench

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Grades of how far below the median a rank or host runs. The bars are
// coloured by grade so that a host a fraction of a percent below the
// median does not look like a straggler.
const (
	gradeNormal    = iota // less than 1% (or a fifth of the threshold) below the median, or above it
	gradeSlight           // up to half the straggler threshold below
	gradeSlow             // up to the threshold below
	gradeStraggler        // more than the threshold below: a straggler
)

// grade sorts devPct (percent vs median; negative is slower) into a grade for
// a straggler threshold of thresholdPct percent.
func grade(devPct, thresholdPct float64) int {
	below := -devPct
	switch {
	case below > thresholdPct:
		return gradeStraggler
	case below > thresholdPct/2:
		return gradeSlow
	case below > min(1, thresholdPct/5):
		return gradeSlight
	default:
		return gradeNormal
	}
}

// gradeLabels names each grade for thresholdPct, for the legend.
func gradeLabels(thresholdPct float64) [4]string {
	lo := min(1, thresholdPct/5)
	return [4]string{
		fmt.Sprintf("within %s%% of median", pctText(lo)),
		fmt.Sprintf("%s–%s%% below", pctText(lo), pctText(thresholdPct/2)),
		fmt.Sprintf("%s–%s%% below", pctText(thresholdPct/2), pctText(thresholdPct)),
		fmt.Sprintf("straggler: >%s%% below", pctText(thresholdPct)),
	}
}

func pctText(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}

// rankBar is one rank's bar: its mean and how it compares with the median.
type rankBar struct {
	Rank      int
	Host      string
	Mean      float64
	DevPct    float64
	Grade     int
	Straggler bool
}

// rankBars lists the reporting ranks of mr in rank order with their grade
// against the median for threshold (a fraction, as in Options).
func rankBars(mr MetricReport, threshold float64) []rankBar {
	slow := map[int]bool{}
	for _, s := range mr.Stragglers {
		slow[s.Rank] = true
	}
	var bars []rankBar
	for _, rr := range mr.Ranks {
		if rr.N == 0 && rr.Final == nil && rr.Mean == 0 {
			continue
		}
		b := rankBar{Rank: rr.Rank, Host: rr.Host, Mean: rr.Mean, Straggler: slow[rr.Rank]}
		if mr.MedianRank > 0 {
			b.DevPct = pct(rr.Mean, mr.MedianRank)
		}
		b.Grade = grade(b.DevPct, threshold*100)
		if b.Straggler {
			b.Grade = gradeStraggler
		} else if b.Grade == gradeStraggler {
			b.Grade = gradeSlow // the analysis did not call it a straggler
		}
		bars = append(bars, b)
	}
	return bars
}

// fitRange returns an axis range that shows every value in vals with a
// margin, not forced to start at 0 so that small differences stay visible.
// The low end stays at or above 0 when every value is.
func fitRange(vals ...float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	if lo > hi {
		return 0, 1
	}
	pad := (hi - lo) * 0.12
	if pad < math.Abs(hi)*0.01 {
		pad = math.Abs(hi) * 0.01
	}
	if pad == 0 {
		pad = 1
	}
	nonNeg := lo >= 0
	lo, hi = lo-pad, hi+pad
	if nonNeg && lo < 0 {
		lo = 0
	}
	return lo, hi
}

// caption is the two lines above the plot: what ran where and when with
// the total, then the command.
func caption(rep Report, total MetricReport) string {
	cmd := strings.Join(rep.Meta.Command, " ")
	if cmd == "" {
		cmd = "(not recorded)"
	}
	if len(cmd) > 170 {
		cmd = cmd[:167] + "..."
	}
	hosts := len(rep.Meta.Hosts)
	if hosts == 0 {
		hosts = len(total.Hosts)
	}
	ranks := rep.Meta.Ranks
	if ranks == 0 {
		ranks = total.RanksTotal
	}
	date := "date unknown"
	if !rep.Meta.Start.IsZero() {
		date = rep.Meta.Start.UTC().Format(time.DateTime + " UTC")
	}
	return fmt.Sprintf("%s on %s  ·  %s  ·  total %s: %s\ncommand: %s", plural(ranks, "rank"), plural(hosts, "host"), date,
		total.Name, valueCI(total.Value, total.CI95, total.Unit), cmd)
}
