package diagnose

import (
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
		{[]string{"a", "b", "c", "d", "e", "f"}, "6 hosts (a, b, c, d, ...)"},
	} {
		if got := hostList(tc.in); got != tc.want {
			t.Errorf("hostList(%v) = %q, want %q", tc.in, got, tc.want)
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
		{"different causes stay apart, in order", []*RankError{
			{Rank: 2, Host: "a", Pid: 1, ExitCode: 1},
			{Rank: 0, Host: "b", Pid: 2, Signal: 9, SignalName: "SIGKILL", ExitCode: 137},
			{Rank: 1, Host: "b", Pid: 3, ExitCode: 1},
			{Rank: 3, Host: "b", Pid: 4, Signal: 9, SignalName: "SIGKILL", ExitCode: 137},
		}, []string{"ranks 1-2 on 2 hosts (a, b): exited with code 1", "ranks 0,3 on b: killed by signal 9 (SIGKILL), exit code 137"}},
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
