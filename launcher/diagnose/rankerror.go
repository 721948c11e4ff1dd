package diagnose

import (
	"fmt"
	"strconv"
)

// RankError is one rank's failure.
type RankError struct {
	Rank       int
	Host       string
	Pid        int
	ExitCode   int
	Signal     int
	SignalName string // as the agent names Signal ("SIGKILL")
	Err        string
	ErrorFile  string // what it wrote to TORCHELASTIC_ERROR_FILE, if anything
	// CutOffBy is the relay whose loss cut this rank's host off (an agent
	// tree): the host is not at fault, the relay is.
	CutOffBy string
}

func (e *RankError) Error() string {
	switch {
	case e.Err != "":
		return fmt.Sprintf("rank %d on %s: %s", e.Rank, e.Host, e.what())
	case e.Signal != 0:
		return fmt.Sprintf("rank %d on %s (pid %d) was %s", e.Rank, e.Host, e.Pid, e.what())
	default:
		return fmt.Sprintf("rank %d on %s (pid %d) %s", e.Rank, e.Host, e.Pid, e.what())
	}
}

// what is e without the rank, host and pid, so identical failures of
// many ranks read the same.
func (e *RankError) what() string {
	switch {
	case e.Err != "":
		return fmt.Sprintf("%s (exit code %d)", e.Err, e.ExitCode)
	case e.Signal != 0:
		name := e.SignalName
		if name == "" {
			name = "signal " + strconv.Itoa(e.Signal)
		}
		return fmt.Sprintf("killed by signal %d (%s), exit code %d", e.Signal, name, e.ExitCode)
	default:
		return fmt.Sprintf("exited with code %d", e.ExitCode)
	}
}
