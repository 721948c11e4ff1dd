package launcher

import (
	"gangway/bench"
)

// failureReport is the failure report for --report: every failed rank of
// the attempt, the one blamed (blamed, -1 for none) first, with its stderr
// tail and the root cause from its TORCHELASTIC_ERROR_FILE.
func (j *job) failureReport(blamed int) []bench.Failure {
	var out []bench.Failure
	for _, f := range j.st.failures {
		bf := bench.Failure{Rank: f.Rank, Host: f.Host, Pid: f.Pid, Blamed: f.Rank == blamed, Cause: f.Error(),
			ExitCode: f.ExitCode, Signal: f.Signal, SignalName: f.SignalName, StderrTail: j.out.tail(f.Rank)}
		if bf.StderrTail == nil {
			bf.StderrTail = []string{}
		}
		if bf.Signal == 0 {
			bf.SignalName = ""
		}
		if exc, frames, ok := rootCause(f.ErrorFile, 8); ok {
			bf.RootCause = &bench.RootCause{Exception: exc, Traceback: append([]string{}, frames...)}
		}
		if bf.Blamed {
			out = append([]bench.Failure{bf}, out...)
		} else {
			out = append(out, bf)
		}
	}
	return out
}
