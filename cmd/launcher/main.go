// Command launcher starts a gang of ranks over gangway agents.
package main

import (
	"os"
	"os/signal"
	"syscall"

	"gangway/agent/proc"
)

func main() {
	if code, ok := proc.Supervise(os.Args); ok { // a local rank's supervisor: this binary re-executed
		os.Exit(code)
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE, syscall.SIGUSR1)
	os.Exit(run(os.Args[1:], sig))
}
