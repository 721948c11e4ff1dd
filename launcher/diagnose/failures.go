package diagnose

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/internal/textx"
	"github.com/gangway-hpc/gangway/launcher/plan"
)

// failureGroup is the ranks that failed the same way: the same message
// (a start error, an exit code, a signal), on one host or several.
type failureGroup struct {
	what  string // the failure without rank, host and pid
	ranks []int
	hosts []string       // in the order of their lowest failed rank
	first map[string]int // each host's lowest failed rank
	errs  []*RankError
}

// groupFailures groups failures by what went wrong, in order of each
// group's first failure.
func groupFailures(fs []*RankError) []*failureGroup {
	var out []*failureGroup
	by := map[string]*failureGroup{}
	for _, f := range fs {
		w := f.what()
		g := by[w]
		if g == nil {
			g = &failureGroup{what: w}
			by[w] = g
			out = append(out, g)
		}
		g.ranks = append(g.ranks, f.Rank)
		g.errs = append(g.errs, f)
		if r, ok := g.first[f.Host]; !ok || f.Rank < r {
			if !ok {
				g.hosts = append(g.hosts, f.Host)
			}
			if g.first == nil {
				g.first = map[string]int{}
			}
			g.first[f.Host] = f.Rank
		}
	}
	// A group's hosts in the order of their ranks (the job's order), not
	// the order their failures came in.
	for _, g := range out {
		slices.SortStableFunc(g.hosts, func(a, b string) int { return cmp.Compare(g.first[a], g.first[b]) })
	}
	return out
}

// String is the group as one line: one rank reads as RankError does
// (with its pid); several as "ranks 0-3,6 on 2 hosts (a, b): what".
func (g *failureGroup) String() string {
	if len(g.errs) == 1 {
		return g.errs[0].Error()
	}
	return fmt.Sprintf("ranks %s on %s: %s", plan.Ranges(g.ranks), HostList(g.hosts), g.what)
}

// ShortList is how many hosts a report names one by one; past it, every
// name in Slurm's node-list form (HostList), and the launch's failure
// says hosts that failed alike on one line.
const ShortList = 4

// HostList is "a", "2 hosts (a, b)", or past ShortList names every name
// in Slurm's compressed form: "312 hosts (gpu[0033-0064,0101-0380])".
func HostList(hosts []string) string {
	if len(hosts) == 1 {
		return hosts[0]
	}
	list := strings.Join(hosts, ", ")
	if len(hosts) > ShortList {
		list = hostfile.CompressNodeList(hosts)
	}
	return fmt.Sprintf("%s (%s)", textx.Count(len(hosts), "host"), list)
}
