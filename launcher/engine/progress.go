package engine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gangway-hpc/gangway/bench"
	"github.com/gangway-hpc/gangway/internal/textx"
)

// progressLine is the live status line printed while ranks report
// throughput (--progress): the attempt, the time since the ranks
// started, the job's throughput so far with its interval, how many ranks
// report it, and the slowest rank and host. It returns "" when no rank
// has printed a recognised figure yet.
func progressLine(rep bench.Report, attempt int, elapsed time.Duration) string {
	i := slices.IndexFunc(rep.Metrics, func(m bench.MetricReport) bool { return m.RanksReporting > 0 })
	if i < 0 {
		return ""
	}
	m := rep.Metrics[i]
	var b strings.Builder
	fmt.Fprintf(&b, "progress: attempt %d, %v: %s %s", attempt+1, elapsed.Round(time.Second), num(m.Value), m.Unit)
	if m.CI95 != nil {
		fmt.Fprintf(&b, " ± %s", num(*m.CI95))
	}
	fmt.Fprintf(&b, " (%s), %d of %s reporting", m.Name, m.RanksReporting, textx.Count(m.RanksTotal, "rank"))
	if s := m.SlowestRank; s != nil && m.RanksReporting > 1 {
		fmt.Fprintf(&b, ", slowest rank %d on %s (%+.1f%%)", s.Rank, s.Host, s.DeviationPct)
	}
	if s := m.SlowestHost; s != nil && len(m.Hosts) > 1 {
		fmt.Fprintf(&b, ", slowest host %s (%+.1f%%)", s.Host, s.DeviationPct)
	}
	return b.String()
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
