package engine

import (
	"context"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/gangway-hpc/gangway/launcher/diagnose"
)

// Scope is how every mode begins and ends: its context is cancelled with
// a diagnose.SignalError by the first stopping signal, or with a
// diagnose.TimeoutError when the timeout (if any) ends; every signal
// also reaches the job loop as an event, and a second stopping signal
// closes Again. End releases it.
type Scope struct {
	cancel context.CancelCauseFunc
	sigs   *signalWatcher
	timer  *time.Timer
}

// Begin starts a mode's Scope over ctx: signals is the launcher's signal
// channel, timeout --timeout (0: none).
func Begin(ctx context.Context, signals <-chan os.Signal, timeout time.Duration) (context.Context, *Scope) {
	ctx, cancel := context.WithCancelCause(ctx)
	s := &Scope{cancel: cancel, sigs: watchSignals(signals, cancel)}
	if timeout > 0 {
		s.timer = time.AfterFunc(timeout, func() { cancel(&diagnose.TimeoutError{After: timeout}) })
	}
	return ctx, s
}

// Again is closed at the second stopping signal: kill, do not wait.
func (s *Scope) Again() <-chan struct{} { return s.sigs.again }

// End stops the timer and the signal watcher, then cancels the context.
func (s *Scope) End() {
	if s.timer != nil {
		s.timer.Stop()
	}
	s.sigs.stop()
	s.cancel(nil)
}

// signalWatcher is the one owner of the launcher's signal channel: the
// first stopping signal cancels the job with a diagnose.SignalError, and
// every signal is passed on to the job loop as an event (evSignal: a
// second one kills; SIGUSR1 is evDumpRequest, which stops nothing).
type signalWatcher struct {
	events chan any
	again  chan struct{} // closed at the second stopping signal
	quit   chan struct{}
	wg     sync.WaitGroup
}

func watchSignals(sigs <-chan os.Signal, cancel context.CancelCauseFunc) *signalWatcher {
	w := &signalWatcher{events: make(chan any, 4), again: make(chan struct{}), quit: make(chan struct{})}
	w.wg.Go(func() {
		n := 0
		for {
			var ev any
			select {
			case s := <-sigs:
				ss, ok := s.(syscall.Signal)
				if !ok {
					ss = syscall.SIGINT
				}
				if ss == syscall.SIGUSR1 {
					ev = evDumpRequest{}
				} else {
					n++
					cancel(&diagnose.SignalError{Signal: ss})
					if n == 2 {
						close(w.again)
					}
					ev = evSignal{sig: s, n: n}
				}
			case <-w.quit:
				return
			}
			select {
			case w.events <- ev:
			default: // the loop has not read the last ones; a kill is already on its way
			}
		}
	})
	return w
}

func (w *signalWatcher) stop() {
	close(w.quit)
	w.wg.Wait()
}
