package proc

import "slices"

// Member is one process of a process group as a /proc snapshot saw it:
// its pid and its start time (clock ticks after boot, field 22 of
// /proc/PID/stat). A pid is reused once its process is reaped; the start
// time tells the process the snapshot saw from a later one given the
// same pid, so whatever acts on a member later (a signal, a debugger)
// checks Current first.
type Member struct {
	Pid   int
	Start uint64
}

// Groups lists the processes of each process group in pgids, from one
// pass over /proc: the leader first when it is still in its group, then
// the others by pid. A group with no process left has no entry.
func Groups(pgids []int) map[int][]Member {
	out := map[int][]Member{}
	want := map[int]bool{}
	for _, g := range pgids {
		want[g] = true
	}
	for _, e := range scanGroups(want) {
		out[e.pgid] = append(out[e.pgid], e.m)
	}
	for g, ms := range out {
		slices.SortFunc(ms, func(a, b Member) int {
			switch {
			case a.Pid == g:
				return -1
			case b.Pid == g:
				return 1
			}
			return a.Pid - b.Pid
		})
	}
	return out
}

type groupEntry struct {
	pgid int
	m    Member
}
