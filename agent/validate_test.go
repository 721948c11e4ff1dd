package agent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/facts"
	"github.com/gangway-hpc/gangway/agent/proc"
	"github.com/gangway-hpc/gangway/agent/wire"
)

// okRank is a rank that passes validation; tests change one field.
func okRank(rank, local int) wire.RankSpec {
	return wire.RankSpec{Rank: rank, LocalRank: local, Argv: []string{"/bin/true"}, Env: []string{"A=1", "PATH=/bin"}}
}

func TestValidateStartJob(t *testing.T) {
	gpuHost := wire.Facts{GPUs: []wire.GPU{{Index: 0}, {Index: 1}, {Index: 2}, {Index: 3}}}
	cpus := []int{0, 1, 2, 3}
	pmi := &wire.PMIJob{KVSName: "kvs", Size: 4}
	with := func(j wire.StartJob, f func(*wire.StartJob)) wire.StartJob {
		j.Ranks = slices.Clone(j.Ranks)
		f(&j)
		return j
	}
	two := wire.StartJob{JobID: "j", StdinRank: -1, KillGrace: time.Second, Ranks: []wire.RankSpec{okRank(2, 0), okRank(3, 1)}}
	tests := []struct {
		name string
		job  wire.StartJob
		f    wire.Facts
		want string // "" = accepted; otherwise a part of the error
	}{
		{"two ranks", two, wire.Facts{}, ""},
		{"no ranks", wire.StartJob{StdinRank: -1}, wire.Facts{}, ""},
		{"with PMI", with(two, func(j *wire.StartJob) { j.PMI = pmi }), wire.Facts{}, ""},
		{"stdin rank on another host", with(two, func(j *wire.StartJob) { j.StdinRank = 0 }), wire.Facts{}, ""},
		{"bind core", with(two, func(j *wire.StartJob) { j.Bind = "core" }), wire.Facts{}, ""},
		{"bind numa", with(two, func(j *wire.StartJob) { j.Bind = "numa" }), wire.Facts{}, ""},
		{"bind none", with(two, func(j *wire.StartJob) { j.Bind = "none" }), wire.Facts{}, ""},
		{"GPUs the host has", with(two, func(j *wire.StartJob) { j.Ranks[0].GPUs, j.Ranks[1].GPUs = []int{0, 1}, []int{3} }), gpuHost, ""},
		{"GPUs on a host that reported none", with(two, func(j *wire.StartJob) { j.Ranks[0].GPUs = []int{7} }), wire.Facts{}, ""},
		{"exported bash function", with(two, func(j *wire.StartJob) { j.Ranks[0].Env = []string{"BASH_FUNC_module%%=() {  eval x\n}"} }), wire.Facts{}, ""},
		{"empty value", with(two, func(j *wire.StartJob) { j.Ranks[0].Env = []string{"EMPTY="} }), wire.Facts{}, ""},

		{"local rank -1 with core binding", with(two, func(j *wire.StartJob) { j.Bind = "core"; j.Ranks[0].LocalRank = -1 }), wire.Facts{},
			"rank 2: local rank -1: want 0 to 1 (this host runs 2 ranks)"},
		{"local rank past the host's ranks", with(two, func(j *wire.StartJob) { j.Ranks[1].LocalRank = 2 }), wire.Facts{},
			"rank 3: local rank 2: want 0 to 1"},
		{"local rank past a host of one rank", wire.StartJob{StdinRank: -1, Ranks: []wire.RankSpec{okRank(0, 1)}}, wire.Facts{},
			"rank 0: local rank 1: want 0 (this host runs 1 rank)"},
		{"rank past a PMI size of 1", with(two, func(j *wire.StartJob) { j.PMI = &wire.PMIJob{KVSName: "k", Size: 1} }), wire.Facts{},
			"rank 2: outside the job's 1 rank"},
		{"duplicate local rank", with(two, func(j *wire.StartJob) { j.Ranks[1].LocalRank = 0 }), wire.Facts{},
			"rank 3: local rank 0 is rank 2's too"},
		{"duplicate rank", with(two, func(j *wire.StartJob) { j.Ranks[1].Rank = 2 }), wire.Facts{}, "rank 2 listed twice"},
		{"negative rank", with(two, func(j *wire.StartJob) { j.Ranks[0].Rank = -5 }), wire.Facts{}, "rank -5: ranks are not negative"},
		{"rank past the PMI size", with(two, func(j *wire.StartJob) { j.PMI = pmi; j.Ranks[1].Rank = 4 }), wire.Facts{},
			"rank 4: outside the job's 4 ranks"},
		{"PMI size 0", with(two, func(j *wire.StartJob) { j.PMI = &wire.PMIJob{KVSName: "k"} }), wire.Facts{}, "PMI job size 0"},
		{"stdin rank -2", with(two, func(j *wire.StartJob) { j.StdinRank = -2 }), wire.Facts{}, "stdin rank -2: want -1 or a rank of the job"},
		{"stdin rank past the PMI size", with(two, func(j *wire.StartJob) { j.PMI = pmi; j.StdinRank = 4 }), wire.Facts{}, "stdin rank 4"},
		{"negative kill grace", with(two, func(j *wire.StartJob) { j.KillGrace = -time.Second }), wire.Facts{}, "kill grace -1s: must not be negative"},
		{"unknown binding", with(two, func(j *wire.StartJob) { j.Bind = "board" }), wire.Facts{}, `-bind-to "board": want none, numa, core, hwthread, socket, socket:N or pe=N`},
		{"bad pe", with(two, func(j *wire.StartJob) { j.Bind = "pe=0" }), wire.Facts{}, `-bind-to "pe=0": want pe=N`},
		{"bad socket count", with(two, func(j *wire.StartJob) { j.Bind = "socket:x" }), wire.Facts{}, `-bind-to "socket:x": want socket:N`},
		{"core binding with more local ranks than CPUs", wire.StartJob{StdinRank: -1, Bind: "core",
			Ranks: []wire.RankSpec{okRank(0, 0), okRank(1, 1), okRank(2, 2), okRank(3, 3), okRank(4, 4)}}, wire.Facts{},
			"rank 4: -bind-to core: local rank 4 needs a CPU of its own, and the agent may use 4 CPUs (0-3)"},
		{"negative GPU", with(two, func(j *wire.StartJob) { j.Ranks[0].GPUs = []int{-1} }), wire.Facts{}, "rank 2: GPU -1: this host has no GPUs"},
		{"GPU the host lacks", with(two, func(j *wire.StartJob) { j.Ranks[1].GPUs = []int{1, 4} }), gpuHost, "rank 3: GPU 4: this host has GPUs 0-3"},
		{"empty argv", with(two, func(j *wire.StartJob) { j.Ranks[0].Argv = nil }), wire.Facts{}, "rank 2: empty command"},
		{"empty program", with(two, func(j *wire.StartJob) { j.Ranks[0].Argv = []string{""} }), wire.Facts{}, "rank 2: empty command"},
		{"NUL in an argument", with(two, func(j *wire.StartJob) { j.Ranks[0].Argv = []string{"/bin/echo", "a\x00b"} }), wire.Facts{},
			`rank 2: argument 1 "a\x00b" contains a NUL byte`},
		{"entry without =", with(two, func(j *wire.StartJob) { j.Ranks[1].Env = []string{"A=1", "JUSTNAME"} }), wire.Facts{},
			`rank 3: environment entry "JUSTNAME": want KEY=VALUE`},
		{"entry without a name", with(two, func(j *wire.StartJob) { j.Ranks[1].Env = []string{"=x"} }), wire.Facts{}, `environment entry "=x"`},
		{"NUL in a value", with(two, func(j *wire.StartJob) { j.Ranks[1].Env = []string{"A=x\x00y"} }), wire.Facts{}, `environment entry "A=x\x00y"`},
		{"job entry without =", with(two, func(j *wire.StartJob) { j.Env = []string{"PATH=/bin", "JUSTNAME"} }), wire.Facts{}, `job environment entry "JUSTNAME": want KEY=VALUE`},
		{"long entry is cut in the message", with(two, func(j *wire.StartJob) { j.Ranks[1].Env = []string{strings.Repeat("X", 1<<20)} }), wire.Facts{},
			`environment entry "` + strings.Repeat("X", 80) + `..."`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := validateStartJob(tc.job, tc.f, cpus)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			case err != nil && len(err.Error()) > 400:
				t.Fatalf("error of %d bytes: Ready.Err must stay short", len(err.Error()))
			}
		})
	}
	if err := validateStartJob(wire.StartJob{StdinRank: -1, Bind: "core", Ranks: []wire.RankSpec{okRank(0, 0)}}, wire.Facts{}, nil); err == nil ||
		!strings.Contains(err.Error(), "may use 0 CPUs") {
		t.Errorf("core binding with no CPUs known: %v", err)
	}
	if err := validateStartJob(wire.StartJob{StdinRank: -1, Bind: "core", Ranks: []wire.RankSpec{okRank(0, 0), okRank(1, 1)}}, wire.Facts{}, []int{5}); err == nil ||
		!strings.Contains(err.Error(), "may use 1 CPU (5)") {
		t.Errorf("core binding with one CPU: %v", err)
	}
}

// FuzzValidateStartJob: validation never panics, and a job it accepts
// can be bound and prepared (PMI sockets and environments) without
// panicking: what reaches spawn is safe to spawn.
func FuzzValidateStartJob(f *testing.F) {
	seeds := []wire.StartJob{
		{StdinRank: -1, Bind: "core", Ranks: []wire.RankSpec{{Rank: 0, LocalRank: -1, Argv: []string{"x"}}}},
		{StdinRank: -1, Bind: "core", Ranks: []wire.RankSpec{okRank(0, 0), okRank(1, 1)}},
		{StdinRank: 0, Bind: "numa", PMI: &wire.PMIJob{KVSName: "kvs", Size: 3}, Ranks: []wire.RankSpec{okRank(0, 1), okRank(2, 0)}},
		{StdinRank: -1, Bind: "numa", Ranks: []wire.RankSpec{{Rank: 1, LocalRank: 0, Argv: []string{"x"}, GPUs: []int{1}}}},
		{StdinRank: -1, Ranks: []wire.RankSpec{okRank(0, 0), okRank(0, 1)}},
		{StdinRank: -1, PMI: &wire.PMIJob{KVSName: "bad name", Size: 1}, Ranks: []wire.RankSpec{okRank(0, 0)}},
	}
	for _, j := range seeds {
		b, _ := json.Marshal(j)
		f.Add(b)
	}
	f.Add([]byte(`{"ranks":[{"rank":0,"local_rank":-1,"argv":["x"]}],"bind":"core","stdin_rank":-1}`))
	f.Add([]byte(`{"ranks":[{"rank":0,"local_rank":0,"argv":["x"]},{"rank":1,"local_rank":1,"argv":["x"]}],"bind":"pe=2","stdin_rank":-1}`))
	f.Add([]byte(`{"ranks":[{"rank":0,"local_rank":1,"argv":["x"]},{"rank":1,"local_rank":0,"argv":["x"]}],"bind":"socket:1","stdin_rank":-1}`))
	f.Add([]byte(`{"ranks":[{"rank":0,"local_rank":0,"argv":["x"]}],"bind":"socket","stdin_rank":-1}`))
	f.Add([]byte(`{"ranks":[{"rank":0,"local_rank":0,"argv":["x"]}],"bind":"pe=99999999999999999999","stdin_rank":-1}`))
	f.Add([]byte(`{"ranks":[{"rank":0,"local_rank":0,"argv":["x"],"gpus":[-3]}],"bind":"numa","stdin_rank":-1}`))

	root := f.TempDir()
	for node, list := range map[string]string{"node0": "0-1", "node1": "2-3"} {
		d := filepath.Join(root, "sys/devices/system/node", node)
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "cpulist"), []byte(list+"\n"), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	a := &Agent{Log: zap.NewNop(), Facts: facts.Options{SysRoot: root}}
	fa := wire.Facts{CPUs: 4, NUMANodes: 2, GPUs: []wire.GPU{{Index: 0, NUMANode: 0}, {Index: 1, NUMANode: 1}}}
	cpus := []int{0, 1, 2, 3}
	f.Fuzz(func(t *testing.T, in []byte) {
		var j wire.StartJob
		if json.Unmarshal(in, &j) != nil {
			return
		}
		if validateStartJob(j, fa, cpus) != nil {
			return
		}
		for _, r := range j.Ranks {
			got, err := a.bindCPUs(j.Bind, r, fa, cpus)
			if j.Bind == "core" && (err != nil || len(got) != 1 || got[0] != cpus[r.LocalRank]) {
				t.Fatalf("rank %d, local rank %d bound to %v %v", r.Rank, r.LocalRank, got, err)
			}
			if pe, _ := parseBind(j.Bind); pe > 0 && (err != nil || !slices.Equal(got, cpus[r.LocalRank*pe:(r.LocalRank+1)*pe])) {
				t.Fatalf("rank %d, local rank %d, %s bound to %v %v", r.Rank, r.LocalRank, j.Bind, got, err)
			}
			_ = rankEnv([]string{"PATH=/bin"}, nil, "", j.Env, r, nil)
		}
		if len(j.Ranks) > 16 {
			return // preparing opens a socket pair per rank
		}
		for i := range j.Ranks {
			j.Ranks[i].Dir = "" // prepare stats it: not this target's business
		}
		s := &session{a: a, log: a.Log, facts: fa, fences: map[int]func(map[string]string, error){}}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_ = s.prepare(ctx, &j)
		s.stopAll(0)
	})
}

// TestStartJobRefused: a StartJob that would have crashed the agent
// (local rank -1 with core binding) is refused in Ready, and the session
// goes on to run a valid one.
func TestStartJobRefused(t *testing.T) {
	a := &Agent{Name: "h0", Version: "test", Log: zap.NewNop()}
	c := serve(t, a)
	c.send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "refused", Host: "h0"})
	c.recv(wire.KindFacts, nil)
	sh := []string{"/bin/sh", "-c", "exit 0"}
	for _, bad := range []wire.StartJob{
		{StdinRank: -1, Bind: "core", Ranks: []wire.RankSpec{{Rank: 0, LocalRank: -1, Argv: sh}}},
		{StdinRank: -1, Ranks: []wire.RankSpec{{Rank: 0, LocalRank: 0, Argv: sh}, {Rank: 0, LocalRank: 1, Argv: sh}}},
	} {
		c.send(wire.KindStart, bad)
		var ready wire.Ready
		c.recv(wire.KindReady, &ready)
		if ready.Err == "" {
			t.Fatalf("%+v accepted", bad)
		}
		t.Logf("refused: %s", ready.Err)
	}
	c.send(wire.KindStart, wire.StartJob{StdinRank: -1, Bind: "core", Ranks: []wire.RankSpec{{Rank: 0, LocalRank: 0, Argv: sh}}})
	var ready wire.Ready
	c.recv(wire.KindReady, &ready)
	if ready.Err != "" {
		t.Fatalf("valid job refused: %s", ready.Err)
	}
	c.send(wire.KindGo, nil)
	for m := c.next(); m.Kind != wire.KindDone; m = c.next() {
		var x wire.Exit
		if m.Kind == wire.KindExit && (m.Decode(&x) != nil || x.Code != 0) {
			t.Fatalf("exit %s", m.Payload)
		}
	}
}

// TestOutputFramesFit: the longest piece the output pumps emit fits one
// output frame, so a rank's long line never breaks its session.
func TestOutputFramesFit(t *testing.T) {
	if proc.MaxLine+1 > wire.MaxOutputData { // a line and its newline
		t.Fatalf("proc.MaxLine %d + 1 > wire.MaxOutputData %d: a long line would end the session", proc.MaxLine, wire.MaxOutputData)
	}
}
