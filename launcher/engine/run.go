package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/bench"
	"github.com/gangway-hpc/gangway/internal/textx"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/diagnose"
	"github.com/gangway-hpc/gangway/launcher/health"
	"github.com/gangway-hpc/gangway/launcher/rankenv"
	"github.com/gangway-hpc/gangway/launcher/transport"
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
func NewJobID() string { return randomHex(6) }

// randomHex is n random bytes in lower-case hex (2n digits).
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
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
// to --max-restarts times; a signal, --timeout (which bounds the whole
// run) or the batch scheduler's ending the job never does.
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
	var leftOut []bench.LeftOut
	for n := 0; ; n++ {
		r := &runner{cfg: cfg, d: d, id: NewJobID(), attempt: n, start: time.Now(), layout: l}
		actx, cancel := context.WithCancelCause(ctx)
		err := r.run(actx, bctx, cancel, scope.sigs.events)
		cause := context.Cause(actx)
		cancel(nil)
		if next, more, ok := r.replaceUnfit(l, err); ok {
			// Nothing ran anywhere: the same attempt again, on spares.
			l, leftOut = next, append(leftOut, more...)
			n--
			continue
		}
		code := r.ending(cause, err)
		// Asked also of a launcher a signal stopped: in a batch script
		// it gets Slurm's SIGTERM with its ranks.
		ended := r.schedulerEnded(bctx, code)
		a := r.record(cause, code)
		a.LeftOut = slices.Clone(leftOut)
		attempts = append(attempts, a)
		var re *diagnose.RankError
		if r.phase < phaseRun || !errors.As(cause, &re) || n >= cfg.Control.MaxRestarts || ended {
			r.lastWords(cause, code)
			return r.summary(code, attempts)
		}
		r.summary(code, nil) // a restarted attempt's throughput is not the job's
		attempts[len(attempts)-1].LastProgress = r.lastProgress()
		l, leftOut = r.replaceBlamed(l, leftOut)
		if code, ok := r.backoff(ctx, n); !ok {
			return code
		}
	}
}

// replaceUnfit is the layout to try the attempt again on when it ended
// before any rank started because hosts were not reached in time (a node
// down at the launch: nothing answered within --unreachable-grace or
// --start-timeout), failed their health checks or the fabric self-test
// found them slow, and enough spares stand by to take every such host's
// place (ok false otherwise: the error ends the job as before). It says
// on the console which host goes and which spare comes.
func (r *runner) replaceUnfit(l rankenv.Layout, err error) (rankenv.Layout, []bench.LeftOut, bool) {
	if r.phase >= phaseRun || err == nil || len(l.Spares) == 0 {
		return l, nil, false
	}
	var out []diagnose.Blame
	var he *health.Error
	var se *SelftestError
	switch nr := notReached(err); {
	case nr != nil:
		for _, e := range nr {
			out = append(out, diagnose.Blame{Host: e.Host, Why: "not reached: " + e.Err.Error()})
		}
	case errors.As(err, &he):
		for _, h := range he.Hosts {
			var why []string
			for _, c := range h.Failed() {
				why = append(why, c.Name+": "+c.Detail)
			}
			out = append(out, diagnose.Blame{Host: h.Name, Why: "unhealthy: " + strings.Join(why, "; ")})
		}
	case errors.As(err, &se):
		for _, i := range se.Index {
			out = append(out, diagnose.Blame{Host: l.Hosts[i].Name, Why: "slow in the fabric self-test"})
		}
	default:
		return l, nil, false
	}
	next, left, rerr := r.swapOut(l, out, " before the start")
	return next, left, rerr == nil && len(left) > 0
}

// replaceBlamed is the next attempt's layout: the hosts this attempt's
// ending is put down to (diagnose.Failures.Blame) left out, spares in
// their places, when enough spares stand by; else the same hosts, the
// console saying why. leftOut gains the hosts left out.
func (r *runner) replaceBlamed(l rankenv.Layout, leftOut []bench.LeftOut) (rankenv.Layout, []bench.LeftOut) {
	if r.job == nil {
		return l, leftOut
	}
	blamed := r.job.failures().Blame()
	if len(blamed) == 0 {
		return l, leftOut
	}
	next, left, err := r.swapOut(l, blamed, "")
	if err != nil {
		names := make([]string, len(blamed))
		for i, b := range blamed {
			names[i] = b.Host
		}
		fmt.Fprintf(r.d.Stderr, "launcher: %s blamed (%s), but the next attempt runs on the same hosts: %v\n",
			strings.Join(names, ", "), blamed[0].Why, err)
		return l, leftOut
	}
	return next, append(leftOut, left...)
}

// swapOut leaves the blamed hosts of l out and puts spares in their
// places (Layout.Replace), saying on the console which host goes, why
// (when says when: "" or " before the start") and which spare comes. A
// blamed name that is not one of l's hosts is passed over.
func (r *runner) swapOut(l rankenv.Layout, blamed []diagnose.Blame, when string) (rankenv.Layout, []bench.LeftOut, error) {
	why := map[string]string{}
	for _, b := range blamed {
		if _, ok := why[b.Host]; !ok {
			why[b.Host] = b.Why
		}
	}
	var gone []string // in l's order, which Replace takes spares in
	for _, h := range l.Hosts {
		if _, ok := why[h.Name]; ok {
			gone = append(gone, h.Name)
		}
	}
	next, taken, err := l.Replace(gone)
	if err != nil {
		return l, nil, err
	}
	left := make([]bench.LeftOut, len(gone))
	for i, name := range gone {
		fmt.Fprintf(r.d.Stderr, "launcher: leaving out %s%s (%s); spare %s takes its place\n", name, when, why[name], taken[i].Name)
		left[i] = bench.LeftOut{Host: name, Why: why[name], Spare: taken[i].Name}
	}
	return next, left, nil
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
	for _, h := range r.layout.Hosts {
		a.Hosts = append(a.Hosts, h.Name)
	}
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
	c, err := dial(ctx, r.cfg, r.d, r.id, r.layout, true)
	if err != nil {
		return err
	}
	// Before anything is prepared anywhere: an unhealthy host ends the
	// launch as a host that cannot be reached does, unless a spare can
	// take its place (Run's replaceUnfit, for both).
	if err := checkHealth(r.d.Log, r.cfg, c); err != nil {
		c.Close()
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
	r.job.spares = len(r.layout.Spares)
	defer r.job.close()
	if err := r.job.prepare(ctx); err != nil {
		return err
	}
	r.phase = phaseRun
	r.job.run(ctx, cancel, sigs)
	return nil
}
