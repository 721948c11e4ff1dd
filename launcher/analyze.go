package launcher

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/gangway-hpc/gangway/bench"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/diagnose"
	"github.com/gangway-hpc/gangway/launcher/engine"
)

func analyze(ctx context.Context, cfg cli.Config, stdout, stderr io.Writer) int {
	opts, err := cfg.Bench.Options()
	if err != nil {
		fmt.Fprintf(stderr, "launcher: %v\n", err)
		return diagnose.ExitUsage
	}
	rep, err := bench.AnalyzeFiles(ctx, cfg.Argv, opts)
	if err != nil {
		if ctx.Err() == nil { // a signal: offline says "interrupted by"
			fmt.Fprintf(stderr, "launcher: %v\n", err)
		}
		return diagnose.ExitSetup
	}
	if len(rep.Metrics) == 0 {
		fmt.Fprintf(stderr, "launcher: no throughput lines found in %s\n", strings.Join(cfg.Argv, ", "))
		return diagnose.ExitSetup
	}
	cfg.Bench.NoSummary = false
	if err := engine.WriteBench(cfg.Bench, rep, stdout); err != nil {
		fmt.Fprintf(stderr, "launcher: %v\n", err)
		return diagnose.ExitSetup
	}
	return 0
}
