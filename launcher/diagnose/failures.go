package diagnose

import (
	"fmt"
	"strings"

	"github.com/gangway-hpc/gangway/internal/textx"
	"github.com/gangway-hpc/gangway/launcher/plan"
)

// failureGroup is the ranks that failed the same way: the same message
// (a start error, an exit code, a signal), on one host or several.
type failureGroup struct {
	what  string // the failure without rank, host and pid
	ranks []int
	hosts []string // in order of first appearance
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
		found := false
		for _, h := range g.hosts {
			found = found || h == f.Host
		}
		if !found {
			g.hosts = append(g.hosts, f.Host)
		}
	}
	return out
}

// String is the group as one line: one rank reads as RankError does
// (with its pid); several as "ranks 0-3,6 on 2 hosts (a, b): what".
func (g *failureGroup) String() string {
	if len(g.errs) == 1 {
		return g.errs[0].Error()
	}
	return fmt.Sprintf("ranks %s on %s: %s", plan.Ranges(g.ranks), hostList(g.hosts), g.what)
}

// hostList is "a", "2 hosts (a, b)", or past four names "9 hosts (a, b, c, d, ...)".
func hostList(hosts []string) string {
	if len(hosts) == 1 {
		return hosts[0]
	}
	names := hosts
	more := ""
	if len(names) > 4 {
		names, more = names[:4], ", ..."
	}
	return fmt.Sprintf("%s (%s%s)", textx.Count(len(hosts), "host"), strings.Join(names, ", "), more)
}
