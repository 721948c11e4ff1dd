package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/internal/term"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/diagnose"
	"github.com/gangway-hpc/gangway/launcher/engine"
	"github.com/gangway-hpc/gangway/launcher/rankenv"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// Main is the launcher's whole life; cmd/launcher only wires.
func Main(ctx context.Context, args []string, d Deps, newLogger func(format string, verbose bool) *zap.Logger) int {
	if len(args) > 0 && args[0] == "--rsh" {
		if d.Log == nil {
			d.Log = newLogger("console", false)
		}
		return rsh(ctx, args[1:], d)
	}
	if len(args) > 0 && (args[0] == "--completion" || args[0] == "-completion") {
		return printCompletion(args[1:], d)
	}
	cfg, code, done := parse(args, d)
	if done {
		return code
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
	if code, done := detectMPI(&cfg, d, os.Getenv); done {
		return code
	}
	return online(ctx, cfg, d)
}

// parse reads and checks the command line, and prints -x's warnings;
// done says Main ends here with code: -h, -version, or an error.
func parse(args []string, d Deps) (cfg cli.Config, code int, done bool) {
	getenv, environ := os.Getenv, d.Environ
	if environ == nil {
		environ = os.Environ()
	} else {
		getenv = func(k string) string {
			v := ""
			for _, kv := range environ {
				if ek, ev, _ := strings.Cut(kv, "="); ek == k {
					v = ev
				}
			}
			return v
		}
	}
	cfg, err := cli.Parse(args, getenv, environ)
	switch {
	case cfg.Mode == cli.ModeHelp:
		fmt.Fprint(d.Stdout, cli.Usage)
		return cfg, 0, true
	case cfg.Mode == cli.ModeVersion:
		bi, _ := debug.ReadBuildInfo()
		fmt.Fprint(d.Stdout, cli.VersionText(d.Version, d.Commit, bi))
		return cfg, 0, true
	case err == nil:
		if berr := cfg.Bench.Check(); berr != nil {
			err = cli.UsageError(berr)
		} else {
			err = cli.CheckPaths(cfg)
		}
	}
	if err != nil {
		fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
		return cfg, diagnose.ExitCode(err, false), true
	}
	for _, w := range cfg.Env.Warnings {
		fmt.Fprintf(d.Stderr, "launcher: warning: %s\n", w)
	}
	return cfg, 0, false
}

// online runs the modes that reach hosts. The plan comes first (a bad -np
// fails before any transport is built, and the srun transport starts
// agents only where ranks run), then the transport, then the mode.
// --mpi=openmpi builds the transport too: mpirun's rsh agent is this
// binary with the same -i, so a bad identity fails here, before mpirun.
func online(ctx context.Context, cfg cli.Config, d Deps) int {
	l := rankenv.Reach(cfg.Place)
	if cfg.Mode == cli.ModeRun {
		var err error
		if l, err = rankenv.Plan(cfg.Place); err == nil {
			// A variable execve cannot pass fails before any host is
			// reached (Prepare checks again, for every attempt).
			err = rankenv.CheckSizes(cfg)
		}
		if err != nil {
			fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
			return diagnose.ExitCode(err, false)
		}
	}
	ed := engine.Deps{Log: d.Log, Dialers: transport.Dialers{Local: d.Local, Remote: d.Remote},
		Stdin: d.Stdin, Stdout: d.Stdout, Stderr: d.Stderr, Signals: d.Signals, Version: d.Version}
	if ed.Dialers.Local == nil && d.NewLocal != nil {
		ed.Dialers.Local = d.NewLocal(d.Log)
	}
	if ed.Dialers.Remote == nil {
		remote, err := transport.New(cfg.Transport, l.Hosts, cfg.Out.Verbose, d.Log)
		if err != nil {
			fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
			return diagnose.ExitSetup
		}
		if c, ok := remote.(io.Closer); ok {
			defer c.Close() // the srun transport's step ends with the launcher
		}
		ed.Dialers.Remote = remote
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
		return inspect(ctx, cfg, ed, l)
	case cli.ModeOpenMPI:
		return runOpenMPI(ctx, cfg, ed, l)
	}
	return engine.Run(ctx, cfg, ed, l)
}

// offline runs the modes that reach no host (--analyze, --dry-run); a
// signal stops them with 128+N.
func offline(ctx context.Context, cfg cli.Config, d Deps) int {
	ctx, scope := engine.Begin(ctx, d.Signals, 0)
	defer scope.End()
	code := 0
	if cfg.Mode == cli.ModeAnalyze {
		code = analyze(ctx, cfg, d.Stdout, d.Stderr)
	} else if err := dryRun(ctx, d.Stdout, cfg); err != nil && ctx.Err() == nil {
		fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
		code = diagnose.ExitUsage
	}
	var se *diagnose.SignalError
	if errors.As(context.Cause(ctx), &se) {
		fmt.Fprintf(d.Stderr, "launcher: interrupted by %s\n", diagnose.SignalName(se.Signal))
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

// Deps are what cmd/launcher wires in.
type Deps struct {
	Log    *zap.Logger
	Local  transport.Dialer // the in-process agent, for localhost
	Remote transport.Dialer // SSH to agents; nil: built from the Config (transport.New)
	// NewLocal builds Local once the logger exists (cmd/launcher wires the
	// in-process agent here so this package never imports agent).
	NewLocal transport.Local
	Stdin    io.Reader
	Stdout   io.Writer
	Stderr   io.Writer
	Signals  <-chan os.Signal
	Version  string
	Commit   string // the commit the binary was built from, "" when not stamped
	Cwd      string
	// Environ is the launcher's environment (-x, the hosts' sources,
	// what the ranks get of it); nil means the process's (os.Environ).
	Environ []string
}

// isTerminal reports whether w is a terminal: a file that answers the
// terminal's own ioctl (/dev/null is a character device, but no terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(f)
}
