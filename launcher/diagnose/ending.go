package diagnose

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gangway-hpc/gangway/internal/osproc"
	"github.com/gangway-hpc/gangway/launcher/cli"
)

// Exit codes of the launcher besides a rank's own.
const (
	ExitSetup   = 1   // hosts unreachable, a host refused the job, bad config
	ExitUsage   = 2   // command-line error
	ExitTimeout = 124 // --timeout expired (as timeout(1))
	ExitLost    = 255 // an agent died or its connection dropped mid-job
)

// SignalError is the cause of a job the launcher was told to stop.
type SignalError struct{ Signal syscall.Signal }

func (e *SignalError) Error() string { return "got " + SignalName(e.Signal) }

// SignalName is a signal as kill(1) and users name it ("SIGINT"), not as
// Go's String words it ("interrupt").
func SignalName(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok {
		if n := unix.SignalName(s); n != "" {
			return n
		}
	}
	return sig.String()
}

// TimeoutError is the cause of a job stopped by --timeout.
type TimeoutError struct{ After time.Duration }

func (e *TimeoutError) Error() string { return fmt.Sprintf("--timeout %v expired", e.After) }

// HangError is the cause of a job stopped by --hang-timeout: no rank
// printed anything for Quiet.
type HangError struct{ Quiet, Limit time.Duration }

func (e *HangError) Error() string {
	return fmt.Sprintf("no rank printed anything for %v (--hang-timeout %v)", e.Quiet.Round(time.Second), e.Limit)
}

// ExitCode is the launcher's exit status for why the job ended: the first
// failing rank's code (1 when that is outside 1..255, as an MPI_Abort code
// may be), 128+N for a signal, 124 for --timeout, 2 for usage errors, 255
// for an agent lost without a rank to blame, 1 otherwise.
func ExitCode(cause error, lost bool) int {
	var re *RankError
	var se *SignalError
	var te *TimeoutError
	var he *HangError
	switch {
	case errors.As(cause, &re) && (re.ExitCode < 1 || re.ExitCode > 255):
		return 1
	case errors.As(cause, &re):
		return re.ExitCode
	case errors.As(cause, &se):
		return osproc.SignalCode(se.Signal)
	case errors.As(cause, &te), errors.As(cause, &he):
		return ExitTimeout
	case errors.Is(cause, cli.ErrUsage):
		return ExitUsage
	case cause != nil:
		return ExitSetup
	case lost:
		return ExitLost
	}
	return 0
}
