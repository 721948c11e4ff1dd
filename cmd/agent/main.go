// Command agent is gangway's per-node agent: an SSH server for stock
// clients, Open MPI's orted and the launcher.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"gangway/agent/proc"
)

func main() {
	if code, ok := proc.Supervise(os.Args); ok { // a job's supervisor: this binary re-executed
		os.Exit(code)
	}
	if code, ok := proc.PID1(os.Args); ok { // a container's init: reap, run the agent as its child
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}
