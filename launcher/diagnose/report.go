package diagnose

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/gangway-hpc/gangway/bench"
)

// Failures are how an attempt's ranks failed, as its job loop recorded
// them: what the launcher says at the end (Write) and the failure report
// of --report (Report) are made from them.
type Failures struct {
	List []*RankError // each failed rank once, in the order they failed
	// Ranks is the job's number of ranks; Stopped how many ranks their
	// hosts said the launcher's stop ended (not those that had ended
	// well, nor those that failed, nor those never heard from).
	Ranks, Stopped int
	Lost           []Lost                  // the lost agents, in the order lost
	Tail           func(rank int) []string // a rank's last stderr lines
}

// Report is the failure report for --report: every failed rank of the
// attempt, the one blamed (blamed, -1 for none) first, with its stderr
// tail and the root cause from its TORCHELASTIC_ERROR_FILE.
func (fs Failures) Report(blamed int) []bench.Failure {
	var out []bench.Failure
	for _, f := range fs.List {
		bf := bench.Failure{Rank: f.Rank, Host: f.Host, Pid: f.Pid, Blamed: f.Rank == blamed, Cause: f.Error(),
			ExitCode: f.ExitCode, Signal: f.Signal, SignalName: f.SignalName, StderrTail: fs.Tail(f.Rank)}
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

// Write prints every failure, the blamed one (cause, when it is a
// RankError) first with its root cause and stderr tail, then how many
// ranks failed and were stopped, and every lost agent.
func (fs Failures) Write(w io.Writer, cause error) {
	var first *RankError
	errors.As(cause, &first)
	groups := groupFailures(fs.List)
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
		for _, l := range fs.Tail(first.Rank) {
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
	if n := len(fs.List); n > 1 {
		fmt.Fprintf(w, "launcher: %d of %d ranks failed\n", n, fs.Ranks)
	}
	// A relay's count is taken as it says, within what the job has left
	// (it could forge its children's output as well).
	if stopped := min(fs.Stopped, fs.Ranks-len(fs.List)); first != nil && stopped > 0 {
		fmt.Fprintf(w, "launcher: %s stopped\n", plural(stopped, "other rank was", "other ranks were"))
	}
	for _, l := range lostLines(fs.Lost) {
		fmt.Fprintf(w, "launcher: %s\n", l)
	}
}

// Lost is an agent lost during an attempt.
type Lost struct {
	Msg   string // as the launcher says it: "lost the agent on b: connection closed"
	Host  string
	Index int // the host's place in the job, which orders a group's hosts
	// Relay is the relay of the agent tree whose loss cut the host off,
	// and Why what that loss was ("connection closed"); "" when the host
	// was lost itself.
	Relay, Why string
}

// LostMessages are the messages of ls, one per host (the --report file's).
func LostMessages(ls []Lost) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Msg)
	}
	return out
}

// lostLines are the lines that say ls: a host lost itself on a line of
// its own, the hosts one relay's loss cut off on one line naming them
// all (hundreds, at a relay of a large job's tree) where there are
// several, in the order each group's first host was lost.
func lostLines(ls []Lost) []string {
	type cut struct{ relay, why string }
	var lines []string
	groups := map[cut][]Lost{}
	at := map[cut]int{} // the group's line
	for _, l := range ls {
		if l.Relay == "" {
			lines = append(lines, l.Msg)
			continue
		}
		k := cut{l.Relay, l.Why}
		if _, ok := at[k]; !ok {
			at[k] = len(lines)
			lines = append(lines, "")
		}
		groups[k] = append(groups[k], l)
	}
	for k, g := range groups {
		if len(g) == 1 {
			lines[at[k]] = g[0].Msg
			continue
		}
		slices.SortFunc(g, func(a, b Lost) int { return cmp.Compare(a.Index, b.Index) })
		names := make([]string, len(g))
		for i, l := range g {
			names[i] = l.Host
		}
		lines[at[k]] = fmt.Sprintf("lost the agents on %s: cut off: their relay %s was lost (%s)", HostList(names), k.relay, k.why)
	}
	return lines
}

// plural is "N one" or "N many", as n asks.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
