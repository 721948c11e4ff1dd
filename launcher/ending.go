package launcher

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"gangway/bench"
	"gangway/launcher/cli"
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

func (e *SignalError) Error() string { return fmt.Sprintf("got %v", e.Signal) }

// TimeoutError is the cause of a job stopped by --timeout.
type TimeoutError struct{ After time.Duration }

func (e *TimeoutError) Error() string { return fmt.Sprintf("--timeout %v expired", e.After) }

// HangError is the cause of a job stopped by --hang-timeout: no rank
// printed anything for Quiet.
type HangError struct{ Quiet, Limit time.Duration }

func (e *HangError) Error() string {
	return fmt.Sprintf("no rank printed anything for %v (--hang-timeout %v)", e.Quiet.Round(time.Second), e.Limit)
}

// exitCode is the launcher's exit status for why the job ended: the first
// failing rank's code (1 when that is outside 1..255, as an MPI_Abort code
// may be), 128+N for a signal, 124 for --timeout, 2 for usage errors, 255
// for an agent lost without a rank to blame, 1 otherwise.
func exitCode(cause error, lost bool) int {
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
		return 128 + int(se.Signal)
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

// ending is the one place that turns why a launch ended into the
// launcher's last words on stderr and its exit status. cause is the job
// context's cause (a signal, the timeout, the first failing rank), err a
// set-up phase's error.
func (r *runner) ending(cause, err error) int {
	w := r.d.Stderr
	var se *SignalError
	if r.phase < phaseRun {
		nothing := "; nothing was started"
		switch {
		case errors.As(cause, &se) && r.phase == phaseDial:
			fmt.Fprintf(w, "launcher: interrupted by %v while reaching the hosts%s\n", se.Signal, nothing)
			return exitCode(cause, false)
		case errors.As(cause, &se):
			fmt.Fprintf(w, "launcher: interrupted by %v before the ranks started%s\n", se.Signal, nothing)
			return exitCode(cause, false)
		case r.phase == phaseDial:
			nothing = ""
		}
		fmt.Fprintf(w, "launcher: %v%s\n", err, nothing)
		return exitCode(err, false)
	}
	if err := r.job.out.close(); err != nil {
		fmt.Fprintf(w, "launcher: --output-filename: %v\n", err)
	}
	code := exitCode(cause, len(r.job.st.lost) > 0)
	r.job.report(w, cause)
	return code
}

// lastWords is the launch's final line, after a job that ran: its exit
// status, and why it differs from the blamed rank's code when it does.
func (r *runner) lastWords(cause error, code int) {
	if r.phase < phaseRun {
		return
	}
	var re *RankError
	switch {
	case errors.As(cause, &re) && re.ExitCode != code:
		fmt.Fprintf(r.d.Stderr, "launcher: exit code %d (rank %d's code %d is not an exit status: outside 1..255)\n", code, re.Rank, re.ExitCode)
	case code != 0:
		fmt.Fprintf(r.d.Stderr, "launcher: exit code %d\n", code)
	}
}

// report prints every failure, the blamed one first with its stderr tail,
// and every lost agent.
func (j *job) report(w io.Writer, cause error) {
	st := j.st
	var first *RankError
	errors.As(cause, &first)
	groups := groupFailures(st.failures)
	var firstGroup *failureGroup
	for _, g := range groups {
		for _, e := range g.errs {
			if e == first {
				firstGroup = g
			}
		}
	}
	if first != nil {
		line := first.Error()
		if firstGroup != nil {
			line = firstGroup.String()
		}
		fmt.Fprintf(w, "launcher: job failed: %s\n", line)
		if exc, frames, ok := rootCause(first.ErrorFile, 8); ok {
			fmt.Fprintf(w, "launcher:   rank %d on %s raised %s (from its TORCHELASTIC_ERROR_FILE)\n", first.Rank, first.Host, exc)
			for _, f := range frames {
				fmt.Fprintf(w, "launcher:   rank %d traceback: %s\n", first.Rank, f)
			}
		}
		for _, l := range j.out.tail(first.Rank) {
			fmt.Fprintf(w, "launcher:   rank %d stderr: %s\n", first.Rank, l)
		}
	}
	for _, g := range groups {
		switch {
		case g == firstGroup:
		case first != nil:
			fmt.Fprintf(w, "launcher: also failed: %s\n", g)
		default:
			fmt.Fprintf(w, "launcher: also failed while stopping: %s\n", g)
		}
	}
	// Ranks that failed after the first were running when it did, but
	// are listed above, not counted as stopped.
	others := len(st.failures) - 1
	if n := len(st.failures); n > 1 {
		fmt.Fprintf(w, "launcher: %d of %d ranks failed\n", n, len(j.ranks))
	}
	if stopped := st.runningAtFirst - others; first != nil && stopped > 0 {
		fmt.Fprintf(w, "launcher: %s stopped\n", plural(stopped, "other rank was", "other ranks were"))
	}
	for _, l := range st.lost {
		fmt.Fprintf(w, "launcher: %s\n", l)
	}
}

// summary prints the throughput summary and writes --report (with every
// attempt) and --plot after the last attempt; failing to write them turns
// a success into ExitSetup. With no attempts (a restarted attempt) it only
// stops the attempt's collector.
func (r *runner) summary(code int, attempts []bench.Attempt) int {
	j := r.job
	if j == nil || j.coll == nil {
		return code
	}
	j.coll.Close()
	<-j.collDone
	if r.phase < phaseRun || attempts == nil {
		return code
	}
	meta := bench.Meta{Command: r.cfg.Argv, Ranks: len(j.ranks), Start: r.start, End: time.Now(), Version: r.d.Version}
	for _, s := range j.sessions {
		meta.Hosts = append(meta.Hosts, s.host.Name)
	}
	rep := j.coll.Report(meta)
	rep.Attempts = attempts
	blamed := -1
	if a := attempts[len(attempts)-1]; a.Rank != nil {
		blamed = *a.Rank
	}
	rep.Failures, rep.Lost = j.failureReport(blamed), j.st.lost
	if err := writeBench(r.cfg.Bench, rep, r.d.Stdout); err != nil {
		fmt.Fprintf(r.d.Stderr, "launcher: %v\n", err)
		if code == 0 {
			code = ExitSetup
		}
	}
	return code
}

// plural is "N one" or "N many", as n asks.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
