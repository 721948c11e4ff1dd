package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"

	"gangway/bench"
	"gangway/internal/textx"
	"gangway/launcher/cli"
	"gangway/launcher/diagnose"
	"gangway/launcher/rankenv"
	"gangway/launcher/transport"
)

// Deps are what a launch uses besides its Config: the logger, the ways to
// the hosts, the launcher's stdio and signals, and its version (the
// agents' Hello, the report).
type Deps struct {
	Log            *zap.Logger
	Dialers        transport.Dialers
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Signals        <-chan os.Signal
	Version        string
}

// NewJobID is a new random job id (the PMI kvs name, the agents' logs).
func NewJobID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// phase is how far a job got; the ending's words depend on it.
type phase int

const (
	phaseDial    phase = iota // reaching the hosts
	phasePrepare              // networks, environments, caches, preflight, Ready
	phaseRun                  // the ranks were started
)

// runner is one attempt of a launch: its phases and how it ended.
type runner struct {
	cfg     cli.Config
	d       Deps
	id      string // the attempt's job id (PMI kvs name, agents' logs)
	attempt int    // TORCHELASTIC_RESTART_COUNT
	start   time.Time
	phase   phase
	layout  rankenv.Layout // the launch's plan, made before its transport
	job     *job           // from prepare on
}

// Run runs the job described by cfg, laid out as l (rankenv.Plan, made
// before the transport in d), and returns the launcher's exit code. An
// attempt is four phases under one cancellation cause: dial, prepare,
// run and close; ending turns the cause into the last words and the
// status. A rank failure or a lost agent starts the whole gang again, up
// to --max-restarts times; a signal or --timeout (which bounds the whole
// run) never does.
func Run(ctx context.Context, cfg cli.Config, d Deps, l rankenv.Layout) int {
	// The collector outlives the job's cancellation: it must still count
	// the lines of ranks being stopped. summary closes it.
	bctx := context.WithoutCancel(ctx)
	ctx, scope := Begin(ctx, d.Signals, cfg.Control.Timeout)
	defer scope.End()
	if cfg.Control.RunID == "" {
		cfg.Control.RunID = NewJobID()
	}
	var attempts []bench.Attempt
	for n := 0; ; n++ {
		r := &runner{cfg: cfg, d: d, id: NewJobID(), attempt: n, start: time.Now(), layout: l}
		actx, cancel := context.WithCancelCause(ctx)
		err := r.run(actx, bctx, cancel, scope.sigs.events)
		cause := context.Cause(actx)
		cancel(nil)
		code := r.ending(cause, err)
		attempts = append(attempts, r.record(cause, code))
		var re *diagnose.RankError
		if r.phase < phaseRun || !errors.As(cause, &re) || n >= cfg.Control.MaxRestarts {
			r.lastWords(cause, code)
			return r.summary(code, attempts)
		}
		r.summary(code, nil) // a restarted attempt's throughput is not the job's
		if code, ok := r.backoff(ctx, n); !ok {
			return code
		}
	}
}

// backoff says why the gang restarts and waits --restart-backoff; a signal
// or the timeout meanwhile ends the launch with its status (ok false).
func (r *runner) backoff(ctx context.Context, n int) (code int, ok bool) {
	c := r.cfg.Control
	if !r.cfg.Out.Quiet {
		fmt.Fprintf(r.d.Stderr, "launcher: restarting the whole gang in %v (restart %d of %d, run %s)\n", c.RestartBackoff, n+1, c.MaxRestarts, c.RunID)
	}
	t := time.NewTimer(c.RestartBackoff)
	defer t.Stop()
	select {
	case <-t.C:
		return 0, true
	case <-ctx.Done():
	}
	cause := context.Cause(ctx)
	fmt.Fprintf(r.d.Stderr, "launcher: %v while waiting to restart; nothing was started\n", cause)
	return diagnose.ExitCode(cause, false), false
}

// record is the attempt as --report lists it.
func (r *runner) record(cause error, code int) bench.Attempt {
	a := bench.Attempt{N: r.attempt, Start: r.start, End: time.Now(), ExitCode: code}
	var re *diagnose.RankError
	if errors.As(cause, &re) {
		rank := re.Rank
		a.Rank, a.Host = &rank, re.Host
	}
	if cause != nil {
		a.Cause = cause.Error()
	}
	return a
}

// run goes through the phases; it returns a set-up error, or nil once the
// job ran (its ending is then the context's cause).
func (r *runner) run(ctx, bctx context.Context, cancel context.CancelCauseFunc, sigs <-chan any) error {
	c, err := Dial(ctx, r.cfg, r.d, r.id, r.layout)
	if err != nil {
		return err
	}
	if r.cfg.Out.Stdin >= len(c.ranks) {
		c.Close()
		return cli.UsageError(fmt.Errorf("--stdin %d: the job has only %s", r.cfg.Out.Stdin, textx.Count(len(c.ranks), "rank")))
	}
	r.phase = phasePrepare
	if r.job, err = newJob(bctx, r.cfg, r.d, r.id, r.attempt, c); err != nil {
		c.Close()
		return err
	}
	defer r.job.close()
	if err := r.job.prepare(ctx); err != nil {
		return err
	}
	r.job.forgetFacts()
	r.phase = phaseRun
	r.job.run(ctx, cancel, sigs)
	return nil
}
