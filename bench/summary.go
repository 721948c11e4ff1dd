package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// WriteSummary writes a compact console table of rep: per metric the total
// with its 95% interval, how many ranks reported, per-host subtotals, the
// slowest rank and host, stragglers, efficiency and notes; then line counts
// when lines were dropped.
func WriteSummary(w io.Writer, rep Report) error {
	ew := &errWriter{w: w}
	writeHeader(ew, rep.Meta)
	if len(rep.Metrics) == 0 {
		ew.printf("bench: no benchmark lines recognised in %d lines\n", rep.Lines.Observed)
	}
	for i, mr := range rep.Metrics {
		if i > 0 {
			ew.printf("\n")
		}
		writeMetric(ew, mr, rep.Options.BaselineIPS)
	}
	writeGoodput(ew, rep)
	if rep.Lines.Dropped > 0 {
		ew.printf("WARNING: %d of %d output lines were dropped unparsed (bench queue full); figures may be incomplete\n",
			rep.Lines.Dropped, rep.Lines.Observed)
	}
	return ew.err
}

// WriteGoodput writes the summary's goodput line alone, for a run that
// restarted but whose last attempt printed no benchmark lines; nothing
// when the run did not restart.
func WriteGoodput(w io.Writer, rep Report) error {
	ew := &errWriter{w: w}
	writeGoodput(ew, rep)
	return ew.err
}

func writeGoodput(ew *errWriter, rep Report) {
	a := rep.Attempts
	if rep.Goodput == nil || len(a) < 2 {
		return
	}
	wall := a[len(a)-1].End.Sub(a[0].Start).Seconds()
	ew.printf("goodput: %.0f%% of %.1f s over %d attempts (successful attempts whole, failed ones up to their last benchmark line)\n",
		100**rep.Goodput, wall, len(a))
}

func writeHeader(ew *errWriter, m Meta) {
	if m.Ranks == 0 {
		return
	}
	ew.printf("bench: %s", plural(m.Ranks, "rank"))
	if len(m.Hosts) > 0 {
		ew.printf(" on %s", plural(len(m.Hosts), "host"))
	}
	if !m.Start.IsZero() && m.End.After(m.Start) {
		ew.printf(", %.1f s", m.End.Sub(m.Start).Seconds())
	}
	if len(m.Command) > 0 {
		ew.printf(": %s", strings.Join(m.Command, " "))
	}
	ew.printf("\n")
}

func writeMetric(ew *errWriter, mr MetricReport, baseline float64) {
	u := mr.Unit
	if mr.Scope == "global" {
		ew.printf("%s [%s, global, %s]\n", mr.Name, unitOr(u), mr.Coverage)
		ew.printf("  %-13s %s\n", "value", valueCI(mr.Value, mr.CI95, u))
	} else {
		ew.printf("%s [%s, per rank, %s]\n", mr.Name, unitOr(u), mr.Coverage)
		only := ""
		if mr.RanksReporting < mr.RanksTotal {
			only = fmt.Sprintf("  (%d of %d ranks only)", mr.RanksReporting, mr.RanksTotal)
		}
		ew.printf("  %-13s %s%s\n", "total", valueCI(mr.Value, mr.CI95, u), only)
		if len(mr.Hosts) > 1 {
			for _, h := range mr.Hosts {
				ew.printf("  %-13s %s  (%d ranks, %s/rank)\n", "host "+hostName(h.Host),
					valueCI(h.Total, h.CI95, u), len(h.Ranks), num1(h.PerRank))
			}
		}
		if s := mr.SlowestRank; s != nil {
			ew.printf("  %-13s rank %d on %s: %s, %+.2f%% vs median rank %s\n", "slowest rank",
				s.Rank, hostName(s.Host), num1(s.Value), s.DeviationPct, num1(mr.MedianRank))
		}
		if s := mr.SlowestHost; s != nil {
			ew.printf("  %-13s %s: %s/rank, %+.2f%% vs median host\n", "slowest host",
				hostName(s.Host), num1(s.Value), s.DeviationPct)
		}
		if mr.RanksReporting > 1 && len(mr.Ranks) > 0 { // none when ranks were not told apart
			ew.printf("  %-13s %s\n", "stragglers", stragglers(mr.Stragglers))
		}
	}
	if mr.Efficiency != nil {
		n := mr.RanksReporting
		if mr.Scope == "global" {
			n = mr.RanksTotal
		}
		ew.printf("  %-13s %.1f%% of %d x %s baseline\n", "efficiency", *mr.Efficiency*100, n, num1(baseline))
	}
	for _, n := range mr.Notes {
		ew.printf("  note: %s\n", n)
	}
}

func stragglers(os []Outlier) string {
	if len(os) == 0 {
		return "none"
	}
	parts := make([]string, len(os))
	for i, o := range os {
		parts[i] = fmt.Sprintf("rank %d on %s (%+.2f%%)", o.Rank, hostName(o.Host), o.DeviationPct)
	}
	return strings.Join(parts, ", ")
}

func valueCI(v float64, ci *float64, unit string) string {
	s := num1(v)
	if ci != nil {
		s += " ± " + num1(*ci)
	}
	if unit != "" {
		s += " " + unit
	}
	return s
}

// num1 prints two decimals, or three significant digits below 1.
func num1(v float64) string {
	if math.Abs(v) >= 1 || v == 0 {
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

func unitOr(u string) string {
	if u == "" {
		return "no unit"
	}
	return u
}

func hostName(h string) string {
	if h == "" {
		return "unknown host"
	}
	return h
}

// errWriter keeps the first write error so printing code stays linear.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err != nil {
		return
	}
	if _, err := fmt.Fprintf(e.w, format, args...); err != nil {
		e.err = fmt.Errorf("write bench summary: %w", err)
	}
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
