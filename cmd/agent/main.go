// Command agent is gangway's per-node agent: an SSH server for stock
// clients, Open MPI's orted and the launcher.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"

	"github.com/gangway-hpc/gangway/agent"
	"github.com/gangway-hpc/gangway/agent/proc"
)

func main() {
	// The agent's work is a chain of small I/O hand-offs (PMI replies,
	// SSH frames, process starts), and every goroutine made ready while a
	// P is idle wakes another thread that spins and sleeps again. On one P
	// the next goroutine runs on the same thread: on a 2-CPU host this
	// cut the agents' CPU per launch by about a quarter and per PMI
	// barrier by a tenth to a quarter, with no loss of output throughput
	// (BENCHMARKS.md). The ranks own the host's CPUs; GOMAXPROCS, when
	// set, still wins.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	if code, ok := proc.Supervise(os.Args); ok { // a job's supervisor: this binary re-executed
		os.Exit(code)
	}
	// What this process inherited stays here: its parent's stray fds (a
	// shell's, a CI runner's) are close-on-exec, and an ignored SIGHUP
	// (nohup) is still ignored by the agent but reset in every child, as
	// sshd and systemd start a session's processes.
	proc.CloseOnExecInherited()
	proc.DefaultSignalsForChildren()
	if code, ok := proc.PID1(os.Args); ok { // a container's init: reap, run the agent as its child
		os.Exit(code)
	}
	ctx, stop := stopOnSignal()
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// stopOnSignal is a context that ends at the first SIGINT or SIGTERM
// (systemctl stop, docker stop, a Ctrl-C) with agent.StoppedError
// naming it, so that each launcher session tells its launcher why; later
// signals are taken and ignored while the agent stops its ranks. stop
// ends it and waits for its goroutine.
func stopOnSignal() (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case sig := <-sigs:
			name := "SIGTERM"
			if sig == os.Interrupt {
				name = "SIGINT"
			}
			cancel(agent.StoppedError{Signal: name})
		case <-ctx.Done():
		}
	})
	return ctx, func() {
		cancel(nil)
		wg.Wait()
	}
}
