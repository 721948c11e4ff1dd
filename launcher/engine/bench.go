package engine

import (
	"fmt"
	"io"

	"github.com/gangway-hpc/gangway/bench"
	"github.com/gangway-hpc/gangway/launcher/cli"
)

func newCollector(cfg cli.Bench) (*bench.Collector, error) {
	opts, err := cfg.Options()
	if err != nil {
		return nil, err
	}
	return bench.NewCollector(opts)
}

// WriteBench writes the throughput report rep as the flags ask: the
// summary on w (unless --no-summary), --report and --plot.
func WriteBench(cfg cli.Bench, rep bench.Report, w io.Writer) error {
	switch {
	case cfg.NoSummary:
	case len(rep.Metrics) > 0:
		if err := bench.WriteSummary(w, rep); err != nil {
			return err
		}
	default:
		if err := bench.WriteGoodput(w, rep); err != nil {
			return err
		}
	}
	if cfg.ReportFile != "" {
		if err := rep.WriteJSON(cfg.ReportFile); err != nil {
			return fmt.Errorf("--report: %w", err)
		}
	}
	if cfg.PlotFile != "" {
		// A job that printed no throughput over time has nothing to draw;
		// that does not make it fail.
		if !hasSeries(rep) {
			_, err := fmt.Fprintf(w, "bench: nothing to plot (no throughput over time recognised); %s not written\n", cfg.PlotFile)
			return err
		}
		if err := bench.WritePlot(cfg.PlotFile, rep); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
	}
	return nil
}

// hasSeries reports whether some rank has a sample after warm-up, which
// is what bench.WritePlot draws.
func hasSeries(rep bench.Report) bool {
	for _, mr := range rep.Metrics {
		for _, rr := range mr.Ranks {
			for _, p := range rr.Series {
				if !p.Warmup {
					return true
				}
			}
		}
	}
	return false
}
