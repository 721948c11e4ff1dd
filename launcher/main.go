package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"

	"gangway/agent/wire"
	"gangway/launcher/cli"
	"gangway/launcher/diagnose"
	"gangway/launcher/rankenv"
	"gangway/launcher/transport"
)

// Main is the launcher's whole life; cmd/launcher only wires.
func Main(ctx context.Context, args []string, d Deps, newLogger func(format string, verbose bool) *zap.Logger) int {
	if len(args) > 0 && args[0] == "--rsh" {
		if d.Log == nil {
			d.Log = newLogger("console", false)
		}
		return Rsh(ctx, args[1:], d)
	}
	if len(args) > 0 && (args[0] == "--completion" || args[0] == "-completion") {
		return printCompletion(args[1:], d)
	}
	cfg, err := cli.Parse(args, os.Getenv, os.Environ())
	switch {
	case cfg.Mode == cli.ModeHelp:
		fmt.Fprint(d.Stdout, cli.Usage)
		return 0
	case cfg.Mode == cli.ModeVersion:
		fmt.Fprintf(d.Stdout, "launcher %s (protocol %d)\n", d.Version, wire.Version)
		return 0
	case err == nil:
		if berr := cfg.Bench.Check(); berr != nil {
			err = cli.UsageError(berr)
		} else {
			err = cli.CheckPaths(cfg)
		}
	}
	if err != nil {
		fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
		return diagnose.ExitCode(err, false)
	}
	for _, w := range cfg.Env.Warnings {
		fmt.Fprintf(d.Stderr, "launcher: warning: %s\n", w)
	}
	if d.Log == nil {
		d.Log = newLogger(cfg.Out.LogFormat, cfg.Out.Verbose)
		if cfg.Out.Quiet {
			d.Log = d.Log.WithOptions(zap.IncreaseLevel(zap.WarnLevel))
		}
		defer d.Log.Sync()
	}
	if cfg.Mode != cli.ModeAnalyze {
		d.Log.Debug("hosts", zap.Stringer("source", cfg.Place.Source), zap.String("hostfile", cfg.Place.Hostfile),
			zap.String("variable", cfg.Place.HostfileVar), zap.Int("count", len(cfg.Place.Hosts)))
	}
	switch cfg.Mode {
	case cli.ModeAnalyze, cli.ModeDryRun:
		return offline(ctx, cfg, d)
	}
	// The plan comes first: a bad -np fails before any transport is
	// built, and the srun transport starts agents only where ranks run.
	l := rankenv.Reach(cfg.Place)
	if cfg.Mode == cli.ModeRun {
		if l, err = rankenv.Plan(cfg.Place); err != nil {
			fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
			return diagnose.ExitCode(err, false)
		}
	}
	if d.Local == nil && d.NewLocal != nil {
		d.Local = d.NewLocal(d.Log)
	}
	if d.Remote == nil {
		remote, err := transport.New(cfg.Transport, l.Hosts, cfg.Out.Verbose, d.Log)
		if err != nil {
			fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
			return diagnose.ExitSetup
		}
		if c, ok := remote.(io.Closer); ok {
			defer c.Close() // the srun transport's step ends with the launcher
		}
		d.Remote = remote
	}
	if cfg.Env.Dir == "" {
		cfg.Env.Dir = d.Cwd
	}
	if cfg.Out.ProgressAuto {
		cfg.Out.Progress = isTerminal(d.Stderr)
	}
	cfg.Out.Tags = cfg.Out.Tags.Resolve(d.Stdout)
	switch cfg.Mode {
	case cli.ModeInspect:
		return Inspect(ctx, cfg, d, l)
	case cli.ModeOpenMPI:
		return RunOpenMPI(ctx, cfg, d)
	}
	return Run(ctx, cfg, d, l)
}

// offline runs the modes that reach no host (--analyze, --dry-run); a
// signal stops them with 128+N.
func offline(ctx context.Context, cfg cli.Config, d Deps) int {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sigs := watchSignals(d.Signals, cancel)
	defer sigs.stop()
	code := 0
	if cfg.Mode == cli.ModeAnalyze {
		code = analyze(ctx, cfg, d.Stdout, d.Stderr)
	} else if err := DryRun(ctx, d.Stdout, cfg); err != nil && ctx.Err() == nil {
		fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
		code = diagnose.ExitUsage
	}
	var se *diagnose.SignalError
	if errors.As(context.Cause(ctx), &se) {
		fmt.Fprintf(d.Stderr, "launcher: interrupted by %v\n", se.Signal)
		return diagnose.ExitCode(se, false)
	}
	return code
}

// printCompletion is `launcher --completion bash|zsh`.
func printCompletion(args []string, d Deps) int {
	if len(args) != 1 {
		fmt.Fprintln(d.Stderr, "launcher: usage: launcher --completion bash|zsh")
		return diagnose.ExitUsage
	}
	script, err := cli.Completion(args[0])
	if err != nil {
		fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
		return diagnose.ExitUsage
	}
	fmt.Fprint(d.Stdout, script)
	return 0
}
