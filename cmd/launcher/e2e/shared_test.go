package e2e_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/launcher"
)

// TestSharedStartOnlyWhenAllTakeIt: when every host's facts say
// TakesShared, each host (eight ranks each) gets the job frame (the
// forwarded environment, the PMI job) once and then a start that refers
// to it and carries none of it; when one host's agent predates the job
// frame, no host gets one and every start is whole, as before. The
// launcher's environment is this process's with a module user's
// variables added, forwarded as by default.
func TestSharedStartOnlyWhenAllTakeIt(t *testing.T) {
	t.Parallel()
	const marker = "LOADEDMODULES=gcc/12.2.0:cuda/12.4.1:nccl/2.21.5:openmpi/4.1.6"
	environ := append(os.Environ(), marker, "_ModuleTable_Sz_=3", "CONDA_DEFAULT_ENV=torch-2.3",
		"LS_COLORS=rs=0:di=01;34:ln=01;36:mh=00:pi=40;33:so=01;35:do=01;35:bd=40;33;01:*.tar=01;31:*.tgz=01;31")
	for _, tc := range []struct {
		name   string
		shared map[string]bool
		frame  bool
	}{
		{"all take it", map[string]bool{"new1": true, "new2": true, "new3": true}, true},
		{"one predates it", map[string]bool{"new1": true, "old2": false, "new3": true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			kinds := map[string][]wire.Kind{}
			starts := map[string]wire.StartJob{}
			jobs := map[string]wire.StartJob{}
			agents := map[string]fakeAgent{}
			var hosts []string
			for h, shared := range tc.shared {
				hosts = append(hosts, h+":8")
				agents[h] = fakeAgent{shared: shared, attack: exitAll, record: func(m wire.Msg) {
					mu.Lock()
					defer mu.Unlock()
					kinds[h] = append(kinds[h], m.Kind)
					var j wire.StartJob
					switch m.Kind {
					case wire.KindStart:
						if m.Decode(&j) == nil {
							starts[h] = j
						}
					case wire.KindJob:
						if m.Decode(&j) == nil {
							jobs[h] = j
						}
					}
				}}
			}
			slices.Sort(hosts)
			remote := fakeAgents(t, agents)
			_, stderr, code := e2e.Run(t, launcher.Deps{Remote: remote, Environ: environ}, "--timeout", "30", "-np", "24", "-H", strings.Join(hosts, ","), "true")
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, stderr)
			}
			mu.Lock()
			defer mu.Unlock()
			for h := range tc.shared {
				st, ok := starts[h]
				if !ok || len(st.Ranks) != 8 {
					t.Errorf("%s: start %s, want one with its 8 ranks", h, brief(st))
					continue
				}
				job, framed := jobs[h]
				if framed != tc.frame {
					t.Errorf("%s: a job frame: %v, want %v (kinds %v)", h, framed, tc.frame, kinds[h])
				}
				if !tc.frame {
					if st.Shared || !slices.Contains(st.Env, marker) {
						t.Errorf("%s: start says Shared %v, forwarded environment in it %v: want a whole start", h, st.Shared, slices.Contains(st.Env, marker))
					}
					continue
				}
				if j, s := slices.Index(kinds[h], wire.KindJob), slices.Index(kinds[h], wire.KindStart); j < 0 || j > s {
					t.Errorf("%s: the job frame came at %d, its start at %d: want it before", h, j, s)
				}
				if !st.Shared || len(st.Env) > 0 || st.PMI != nil {
					t.Errorf("%s: start %s: want Shared with no env and no pmi of its own", h, brief(st))
				}
				if !slices.Contains(job.Env, marker) || job.JobID != st.JobID || job.CheckShared() != nil {
					t.Errorf("%s: job frame %s for start of %s", h, brief(job), st.JobID)
				}
			}
		})
	}
}

// brief is a StartJob in a line: its job, whether Shared, and the sizes of
// its environment and ranks.
func brief(j wire.StartJob) string {
	return fmt.Sprintf("{job %s shared %v env %d entries pmi %v ranks %d}", j.JobID, j.Shared, len(j.Env), j.PMI != nil, len(j.Ranks))
}

// exitAll ends every rank of a fake host with code 0, then its session.
func exitAll(s *fakeSession) error {
	for _, r := range s.ranks {
		if err := s.exit(wire.Exit{Rank: r, Pid: 1000 + r}); err != nil {
			return err
		}
	}
	return s.c.Send(wire.KindDone, nil)
}
