package launcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Deps are what cmd/launcher wires in.
type Deps struct {
	Log    *zap.Logger
	Local  Dialer // the in-process agent, for localhost
	Remote Dialer // SSH to agents; nil: built from the Config
	// NewLocal builds Local once the logger exists (cmd/launcher wires the
	// in-process agent here so this package never imports agent).
	NewLocal func(log *zap.Logger) Dialer
	Stdin    io.Reader
	Stdout   io.Writer
	Stderr   io.Writer
	Signals  <-chan os.Signal
	Version  string
	Cwd      string
}

func newJobID() string {
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

// runner is one launch: its phases and how it ended.
type runner struct {
	cfg   Config
	d     Deps
	id    string
	start time.Time
	phase phase
	job   *job // from prepare on
}

// Run runs the job described by cfg and returns the launcher's exit code.
// A job is four phases under one cancellation cause: dial, prepare, run
// and close; ending turns the cause into the last words and the status.
func Run(ctx context.Context, cfg Config, d Deps) int {
	// The collector outlives the job's cancellation: it must still count
	// the lines of ranks being stopped. run closes it.
	bctx := context.WithoutCancel(ctx)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sigs := watchSignals(d.Signals, cancel)
	defer sigs.stop()
	r := &runner{cfg: cfg, d: d, id: newJobID(), start: time.Now()}
	err := r.run(ctx, bctx, cancel, sigs.events)
	code := r.ending(context.Cause(ctx), err)
	return r.summary(code)
}

// run goes through the phases; it returns a set-up error, or nil once the
// job ran (its ending is then the context's cause).
func (r *runner) run(ctx, bctx context.Context, cancel context.CancelCauseFunc, sigs <-chan evSignal) error {
	c, err := dial(ctx, r.cfg, r.d, r.id, true)
	if err != nil {
		return err
	}
	if r.cfg.Out.Stdin >= len(c.ranks) {
		c.close()
		return usageError{fmt.Errorf("--stdin %d: the job has only %d ranks", r.cfg.Out.Stdin, len(c.ranks))}
	}
	r.phase = phasePrepare
	if r.job, err = newJob(bctx, r.cfg, r.d, r.id, c); err != nil {
		c.close()
		return err
	}
	defer r.job.close()
	if err := r.job.prepare(ctx); err != nil {
		return err
	}
	r.phase = phaseRun
	r.job.run(ctx, cancel, sigs)
	return nil
}

// signalWatcher is the one owner of the launcher's signal channel: the
// first signal cancels the job with a SignalError, and every signal is
// passed on to the job loop (which kills at the second).
type signalWatcher struct {
	events chan evSignal
	quit   chan struct{}
	wg     sync.WaitGroup
}

func watchSignals(sigs <-chan os.Signal, cancel context.CancelCauseFunc) *signalWatcher {
	w := &signalWatcher{events: make(chan evSignal, 4), quit: make(chan struct{})}
	w.wg.Go(func() {
		for n := 1; ; n++ {
			select {
			case s := <-sigs:
				ss, ok := s.(syscall.Signal)
				if !ok {
					ss = syscall.SIGINT
				}
				cancel(&SignalError{Signal: ss})
				select {
				case w.events <- evSignal{sig: s, n: n}:
				default: // the loop has not read the last ones; a kill is already on its way
				}
			case <-w.quit:
				return
			}
		}
	})
	return w
}

func (w *signalWatcher) stop() {
	close(w.quit)
	w.wg.Wait()
}
