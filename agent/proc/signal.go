package proc

import (
	"fmt"
	"strings"
	"syscall"
)

// signals is the one table of signal names in gangway's agent, without
// the SIG prefix: the signals a launcher may ask to deliver (ParseSignal)
// and the names the agent reports (SignalName).
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

// SignalName is the name of s with its SIG prefix ("SIGKILL"), as
// wire.Exit carries it, or "" for a signal that is not in the table.
func SignalName(s syscall.Signal) string {
	for n, v := range signals {
		if v == s {
			return "SIG" + n
		}
	}
	return ""
}
