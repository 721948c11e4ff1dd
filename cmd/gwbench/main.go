// Command gwbench is `make bench` and `make bench-quick`: gangway against
// mpirun, mpiexec.hydra, pdsh and a bash ssh fan-out on the same
// network-namespace hosts, interleaved, with medians and ratios; writes
// bench/results/<timestamp>.json and BENCHMARKS.md. See run.go.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
