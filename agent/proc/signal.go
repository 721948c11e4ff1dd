package proc

import (
	"fmt"
	"strings"
	"syscall"
)

// sigName returns the short name of a signal ("TERM").
func sigName(s syscall.Signal) string {
	for n, v := range signals {
		if v == s {
			return n
		}
	}
	return fmt.Sprintf("SIG%d", int(s))
}

// signals is the allowlist of signals a launcher may ask to deliver.
var signals = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT,
	"KILL": syscall.SIGKILL, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2,
	"TERM": syscall.SIGTERM, "CONT": syscall.SIGCONT, "STOP": syscall.SIGSTOP,
	"ABRT": syscall.SIGABRT, "ALRM": syscall.SIGALRM, "SEGV": syscall.SIGSEGV,
	"PIPE": syscall.SIGPIPE, "BUS": syscall.SIGBUS, "FPE": syscall.SIGFPE, "ILL": syscall.SIGILL,
}

// ParseSignal maps a signal name ("TERM", "SIGTERM") from the allowlist.
func ParseSignal(name string) (syscall.Signal, error) {
	s, ok := signals[strings.TrimPrefix(strings.ToUpper(name), "SIG")]
	if !ok {
		return 0, fmt.Errorf("signal %q is not allowed", name)
	}
	return s, nil
}

// SignalName is the allowlisted short name of s ("TERM").
func SignalName(s syscall.Signal) string { return sigName(s) }
