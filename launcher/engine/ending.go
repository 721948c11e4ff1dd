package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gangway-hpc/gangway/bench"
	"github.com/gangway-hpc/gangway/launcher/diagnose"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// ending is the one place that turns why a launch ended into the
// launcher's last words on stderr and its exit status. cause is the job
// context's cause (a signal, the timeout, the first failing rank), err a
// set-up phase's error.
func (r *runner) ending(cause, err error) int {
	w := r.d.Stderr
	var se *diagnose.SignalError
	if r.phase < phaseRun {
		nothing := "; nothing was started"
		switch {
		case errors.As(cause, &se) && r.phase == phaseDial:
			fmt.Fprintf(w, "launcher: interrupted by %s while reaching the hosts%s\n", diagnose.SignalName(se.Signal), nothing)
			return diagnose.ExitCode(cause, false)
		case errors.As(cause, &se):
			fmt.Fprintf(w, "launcher: interrupted by %s before the ranks started%s\n", diagnose.SignalName(se.Signal), nothing)
			return diagnose.ExitCode(cause, false)
		case r.phase == phaseDial:
			nothing = ""
		}
		fmt.Fprintf(w, "launcher: %v%s\n", err, nothing)
		return diagnose.ExitCode(err, false)
	}
	if err := r.job.out.close(); err != nil {
		fmt.Fprintf(w, "launcher: --output-filename: %v\n", err)
	}
	code := diagnose.ExitCode(cause, len(r.job.st.lost) > 0)
	r.job.failures().Write(w, cause)
	return code
}

// schedulerEnded asks the transport, after a job that ran and failed,
// whether the batch scheduler ended the job (transport.JobEnder), and
// says so on stderr: then ranks killed by a signal were killed from
// outside, and the attempt is not started again, since the allocation
// is gone.
func (r *runner) schedulerEnded(ctx context.Context, code int) bool {
	je, ok := r.d.Dialers.Remote.(transport.JobEnder)
	if !ok || code == 0 || r.phase < phaseRun {
		return false
	}
	msg := je.JobEnded(ctx)
	if msg == "" {
		return false
	}
	fmt.Fprintf(r.d.Stderr, "launcher: %s\n", msg)
	return true
}

// lastWords is the launch's final line, after a job that ran: its exit
// status, and why it differs from the blamed rank's code when it does.
func (r *runner) lastWords(cause error, code int) {
	if r.phase < phaseRun {
		return
	}
	var re *diagnose.RankError
	switch {
	case errors.As(cause, &re) && re.ExitCode != code:
		fmt.Fprintf(r.d.Stderr, "launcher: exit code %d (rank %d's code %d is not an exit status: outside 1..255)\n", code, re.Rank, re.ExitCode)
	case code != 0:
		fmt.Fprintf(r.d.Stderr, "launcher: exit code %d\n", code)
	}
}

// summary prints the throughput summary and writes --report (with every
// attempt and the self-test) and --plot after the last attempt, or
// after a self-test that stopped the job; failing to write them turns
// a success into diagnose.ExitSetup. With no attempts (a restarted
// attempt) it only stops the attempt's collector.
func (r *runner) summary(code int, attempts []bench.Attempt) int {
	j := r.job
	if j == nil || j.coll == nil {
		return code
	}
	j.coll.Close()
	<-j.collDone
	// A job the self-test stopped still gets its report: the self-test
	// is what it is about.
	stopped := j.selftest != nil && j.selftest.Stopped
	if r.phase < phaseRun && !stopped || attempts == nil {
		return code
	}
	meta := bench.Meta{Command: r.cfg.Argv, Ranks: len(j.ranks), Start: r.start, End: time.Now(), Version: r.d.Version}
	for _, s := range j.sessions {
		meta.Hosts = append(meta.Hosts, s.host.Name)
	}
	rep := j.coll.Report(meta)
	attempts[len(attempts)-1].LastProgress = r.lastProgress()
	rep.Attempts = attempts
	if g, ok := bench.Goodput(attempts); ok {
		rep.Goodput = &g
	}
	blamed := -1
	if a := attempts[len(attempts)-1]; a.Rank != nil {
		blamed = *a.Rank
	}
	rep.Failures, rep.Lost = j.failures().Report(blamed), diagnose.LostMessages(j.st.lost)
	rep.Selftest = j.selftest
	if err := WriteBench(r.cfg.Bench, rep, r.d.Stdout); err != nil {
		fmt.Fprintf(r.d.Stderr, "launcher: %v\n", err)
		if code == 0 {
			code = diagnose.ExitSetup
		}
	}
	return code
}

// lastProgress is when the attempt's ranks last printed a benchmark line,
// nil when they printed none (or the attempt never got its collector).
// Call it once summary has drained the collector.
func (r *runner) lastProgress() *time.Time {
	if r.job == nil || r.job.coll == nil {
		return nil
	}
	t := r.job.coll.LastSample()
	if t.IsZero() {
		return nil
	}
	return &t
}

// failures are the attempt's failures as the loop recorded them.
func (j *job) failures() diagnose.Failures {
	return diagnose.Failures{List: j.st.failures, Ranks: len(j.ranks), Stopped: j.st.stoppedRanks, Lost: j.st.lost, Tail: j.out.tail}
}
