package diagnose

import (
	"fmt"
	"strings"
	"testing"
)

func TestHostList(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{[]string{"a"}, "a"},
		{[]string{"a", "b"}, "2 hosts (a, b)"},
		{[]string{"a", "b", "c", "d"}, "4 hosts (a, b, c, d)"},
		// Past four, every name, as Slurm writes a node list.
		{[]string{"a", "b", "c", "d", "e", "f"}, "6 hosts (a,b,c,d,e,f)"},
		{[]string{"gpu0036", "gpu0033", "gpu0034", "gpu0035", "gpu0101", "login1"}, "6 hosts (gpu[0033-0036,0101],login1)"},
	} {
		if got := HostList(tc.in); got != tc.want {
			t.Errorf("HostList(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestGroupFailures(t *testing.T) {
	const notFound = "train.py: program not found in PATH or the working directory /w (PATH=/usr/bin:/bin)"
	for _, tc := range []struct {
		name string
		in   []*RankError
		want []string
	}{
		{"one", []*RankError{{Rank: 3, Host: "a", Pid: 10, ExitCode: 7}},
			[]string{"rank 3 on a (pid 10) exited with code 7"}},
		{"same start error on two hosts", []*RankError{
			{Rank: 0, Host: "a", ExitCode: 127, Err: notFound}, {Rank: 1, Host: "a", ExitCode: 127, Err: notFound},
			{Rank: 3, Host: "b", ExitCode: 127, Err: notFound}, {Rank: 2, Host: "b", ExitCode: 127, Err: notFound},
		}, []string{"ranks 0-3 on 2 hosts (a, b): " + notFound + " (exit code 127)"}},
		{"same exit code, pids differ", []*RankError{
			{Rank: 5, Host: "a", Pid: 1, ExitCode: 1}, {Rank: 4, Host: "a", Pid: 2, ExitCode: 1},
		}, []string{"ranks 4-5 on a: exited with code 1"}},
		// Groups in the order of their first failure; a group's hosts in
		// the order of their ranks (b runs rank 1, a rank 2).
		{"different causes stay apart, in order", []*RankError{
			{Rank: 2, Host: "a", Pid: 1, ExitCode: 1},
			{Rank: 0, Host: "b", Pid: 2, Signal: 9, SignalName: "SIGKILL", ExitCode: 137},
			{Rank: 1, Host: "b", Pid: 3, ExitCode: 1},
			{Rank: 3, Host: "b", Pid: 4, Signal: 9, SignalName: "SIGKILL", ExitCode: 137},
		}, []string{"ranks 1-2 on 2 hosts (b, a): exited with code 1", "ranks 0,3 on b: killed by signal 9 (SIGKILL), exit code 137"}},
		{"cut off by one relay, on many hosts", cutOff("r", 16, 64),
			[]string{"ranks 16-63 on 6 hosts (n[0002-0007]): lost the agent: cut off: its relay r was lost (connection closed) (exit code 255)"}},
		{"same code, one with a message", []*RankError{
			{Rank: 0, Host: "a", Pid: 1, ExitCode: 1, Err: "exited without PMI finalize (MPI_Finalize not called)"},
			{Rank: 1, Host: "a", Pid: 2, ExitCode: 1},
		}, []string{"rank 0 on a: exited without PMI finalize (MPI_Finalize not called) (exit code 1)", "rank 1 on a (pid 2) exited with code 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, g := range groupFailures(tc.in) {
				got = append(got, g.String())
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// cutOff are the ranks from lo to hi-1, eight a host on hosts n0000...,
// failed as the launcher fails them when relay cut their hosts off.
func cutOff(relay string, lo, hi int) []*RankError {
	var out []*RankError
	for r := lo; r < hi; r++ {
		out = append(out, &RankError{Rank: r, Host: fmt.Sprintf("n%04d", r/8), ExitCode: ExitLost,
			Err: "lost the agent: cut off: its relay " + relay + " was lost (connection closed)", CutOffBy: relay})
	}
	return out
}

// TestLostLines: a host lost itself has a line of its own; the hosts one
// relay's loss cut off share one line naming every one of them, in job
// order, at the place of the first lost; a group of one reads as a host
// alone.
func TestLostLines(t *testing.T) {
	lost := func(i int, relay, why string) Lost {
		h := fmt.Sprintf("gpu%04d", i)
		l := Lost{Host: h, Index: i, Msg: "lost the agent on " + h + ": connection closed"}
		if relay != "" {
			l.Relay, l.Why = relay, why
			l.Msg = fmt.Sprintf("lost the agent on %s: cut off: its relay %s was lost (%s)", h, relay, why)
		}
		return l
	}
	in := []Lost{lost(1, "", "")}
	for _, i := range []int{40, 33, 34, 35, 36, 37, 38, 39, 64} {
		in = append(in, lost(i, "gpu0001", "connection closed"))
	}
	in = append(in, lost(70, "gpu0002", "no answer to SSH keepalives for 15s"), lost(2, "", ""))
	want := []string{
		"lost the agent on gpu0001: connection closed",
		"lost the agents on 9 hosts (gpu[0033-0040,0064]): cut off: their relay gpu0001 was lost (connection closed)",
		"lost the agent on gpu0070: cut off: its relay gpu0002 was lost (no answer to SSH keepalives for 15s)",
		"lost the agent on gpu0002: connection closed",
	}
	if got := lostLines(in); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := LostMessages(in); len(got) != len(in) || got[2] != in[2].Msg {
		t.Errorf("LostMessages: %q, want every host's message", got)
	}
}

// TestWriteStopped: the report's count of stopped ranks is what their
// hosts said the stop ended, printed only when a rank was blamed, within
// the ranks that did not fail.
func TestWriteStopped(t *testing.T) {
	r2 := &RankError{Rank: 2, Host: "cn1", Pid: 10, ExitCode: 7}
	r9 := &RankError{Rank: 9, Host: "cn2", Pid: 11, ExitCode: 1}
	for _, tc := range []struct {
		name    string
		fs      Failures
		cause   error
		want    string // "" for no count
		wantNot bool
	}{
		{"blamed", Failures{List: []*RankError{r2}, Ranks: 16, Stopped: 15}, r2, "launcher: 15 other ranks were stopped\n", false},
		{"one", Failures{List: []*RankError{r2}, Ranks: 16, Stopped: 1}, r2, "launcher: 1 other rank was stopped\n", false},
		{"none stopped", Failures{List: []*RankError{r2}, Ranks: 16}, r2, "other rank", true},
		{"no rank blamed", Failures{List: []*RankError{r2}, Ranks: 16, Stopped: 15}, fmt.Errorf("timed out"), "other rank", true},
		{"more than are left", Failures{List: []*RankError{r2, r9}, Ranks: 16, Stopped: 40}, r2, "launcher: 14 other ranks were stopped\n", false},
	} {
		tc.fs.Tail = func(int) []string { return nil }
		var b strings.Builder
		tc.fs.Write(&b, tc.cause)
		if strings.Contains(b.String(), tc.want) == tc.wantNot {
			t.Errorf("%s: report %s %q:\n%s", tc.name, map[bool]string{false: "lacks", true: "has"}[tc.wantNot], tc.want, b.String())
		}
	}
}
