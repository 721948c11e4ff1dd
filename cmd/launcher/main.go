// Command launcher starts a gang of ranks over gangway agents.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE, syscall.SIGUSR1)
	os.Exit(run(os.Args[1:], sig))
}
