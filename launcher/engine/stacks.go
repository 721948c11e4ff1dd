package engine

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/gangway-hpc/gangway/launcher/diagnose"
)

// reportStacks writes each rank's stacks to DIR/rank.R/stacks.txt (the
// --output-filename directory, else a new temporary one) and says where,
// then what diagnose.StackFindings finds in them.
func (j *job) reportStacks(a actStacks, started time.Time) {
	dir := j.cfg.Out.Dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "gangway-stacks-"+j.id+"-"); err != nil {
			j.out.say(fmt.Sprintf("cannot keep the stacks: %v", err))
			return
		}
	}
	for _, r := range j.ranks {
		text := a.stacks[r.Rank]
		if text == "" {
			text = "(no stacks from this rank's host)\n"
		}
		f, err := openRankFile(dir, r.Rank, "stacks.txt")
		if err == nil {
			_, err = f.WriteString(text)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			j.out.say(fmt.Sprintf("rank %d: cannot write its stacks: %v", r.Rank, err))
		}
	}
	tools := strings.Join(a.tools, ", ")
	if tools == "" {
		tools = "no stack tool found on the hosts"
	}
	j.out.say(fmt.Sprintf("stacks of every rank in %s (rank.R/stacks.txt; %s)", dir, tools))
	hostOf := func(rank int) string { return j.sessions[j.st.hostOf[rank]].host.Name }
	for _, l := range diagnose.StackFindings(a.stacks, len(j.ranks), hostOf, j.quiet, started, j.quietAt) {
		j.out.say(l)
	}
}
