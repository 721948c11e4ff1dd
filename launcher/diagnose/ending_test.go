package diagnose

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/gangway-hpc/gangway/launcher/cli"
)

func TestExitCode(t *testing.T) {
	tests := []struct {
		cause error
		lost  bool
		want  int
	}{
		{nil, false, 0},
		{nil, true, ExitLost},
		{&RankError{ExitCode: 3}, true, 3},
		{&RankError{ExitCode: 255}, false, 255},
		{&RankError{ExitCode: 256}, false, 1}, // MPI_Abort(comm, 256): not 0
		{&RankError{ExitCode: -1}, false, 1},
		{&RankError{ExitCode: 0, Err: "exited without PMI finalize"}, false, 1},
		{&SignalError{Signal: syscall.SIGTERM}, false, 143},
		{&TimeoutError{}, false, ExitTimeout},
		{cli.UsageError(errors.New("x")), false, ExitUsage},
		{fmt.Errorf("host a: %w", errors.New("refused")), false, ExitSetup},
	}
	for _, tt := range tests {
		if got := ExitCode(tt.cause, tt.lost); got != tt.want {
			t.Errorf("ExitCode(%v, %v) = %d, want %d", tt.cause, tt.lost, got, tt.want)
		}
	}
}

func TestSignalName(t *testing.T) {
	for _, tc := range []struct {
		sig  os.Signal
		want string
	}{{syscall.SIGINT, "SIGINT"}, {syscall.SIGTERM, "SIGTERM"}, {os.Interrupt, "SIGINT"}, {syscall.Signal(77), "signal 77"}} {
		if got := SignalName(tc.sig); got != tc.want {
			t.Errorf("SignalName(%v) = %q, want %q", tc.sig, got, tc.want)
		}
	}
	if got := (&SignalError{Signal: syscall.SIGHUP}).Error(); got != "got SIGHUP" {
		t.Errorf("SignalError = %q, want got SIGHUP", got)
	}
}
