package wire

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestExpand: the compact form becomes the whole one (the job's command
// and directory where a rank has none, identity under HostEnv under the
// rank's own Env, one entry per name, sorted); the whole form is left as
// it is; a Place that cannot be this host's, or an entry without "=",
// is refused naming the rank.
func TestExpand(t *testing.T) {
	two := func(p0, p1 *Place) StartJob {
		return StartJob{Argv: []string{"python3", "train.py"}, Dir: "/scratch", HostEnv: []string{"GANGWAY_HOST=cn2", "NCCL_SOCKET_IFNAME=enp1s0f0"},
			Ranks: []RankSpec{
				{Rank: 8, LocalRank: 0, Place: p0, Env: []string{"CUDA_VISIBLE_DEVICES=0"}},
				{Rank: 9, LocalRank: 1, Place: p1, Env: []string{"CUDA_VISIBLE_DEVICES=1", "NCCL_SOCKET_IFNAME=eth9"}, Argv: []string{"own"}, Dir: "/own"},
			}}
	}
	j := two(&Place{Node: 1, LocalSize: 2, Cross: 1, CrossSize: 2}, &Place{Node: 1, LocalSize: 2, Cross: 0, CrossSize: 1})
	if err := j.Expand(); err != nil {
		t.Fatal(err)
	}
	if j.Argv != nil || j.Dir != "" || j.HostEnv != nil {
		t.Errorf("job-level compact fields left: %+v", j)
	}
	r0, r1 := j.Ranks[0], j.Ranks[1]
	if !slices.Equal(r0.Argv, []string{"python3", "train.py"}) || r0.Dir != "/scratch" || !slices.Equal(r1.Argv, []string{"own"}) || r1.Dir != "/own" || r0.Place != nil {
		t.Errorf("commands and directories: %+v", j.Ranks)
	}
	want0 := []string{"CUDA_VISIBLE_DEVICES=0", "GANGWAY_HOST=cn2", "GROUP_RANK=1", "HOROVOD_CROSS_RANK=1", "HOROVOD_CROSS_SIZE=2",
		"HOROVOD_LOCAL_RANK=0", "HOROVOD_LOCAL_SIZE=2", "HOROVOD_RANK=8", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2", "MPI_LOCALNRANKS=2",
		"MPI_LOCALRANKID=0", "NCCL_SOCKET_IFNAME=enp1s0f0", "OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_LOCAL_SIZE=2",
		"OMPI_COMM_WORLD_NODE_RANK=0", "OMPI_COMM_WORLD_RANK=8", "PMI_RANK=8", "RANK=8", "ROLE_RANK=8"}
	if !slices.Equal(r0.Env, want0) {
		t.Errorf("rank 8:\n%q\nwant\n%q", r0.Env, want0)
	}
	if !slices.Contains(r1.Env, "NCCL_SOCKET_IFNAME=eth9") || !slices.Contains(r1.Env, "HOROVOD_CROSS_SIZE=1") || !slices.IsSorted(r1.Env) {
		t.Errorf("rank 9 (its own Env wins over HostEnv): %q", r1.Env)
	}

	whole := StartJob{Env: []string{"A=1"}, Ranks: []RankSpec{{Rank: 0, Argv: []string{"p"}, Env: []string{"Z=1", "RANK=0"}}}}
	before, _ := json.Marshal(whole)
	if err := whole.Expand(); err != nil {
		t.Fatal(err)
	}
	if after, _ := json.Marshal(whole); string(after) != string(before) {
		t.Errorf("whole form changed:\n%s\n%s", before, after)
	}

	for _, tc := range []struct {
		j    StartJob
		want string
	}{
		{two(&Place{LocalSize: 3, CrossSize: 1}, nil), "rank 8: place: local size 3, but this host runs 2"},
		{two(&Place{LocalSize: 2, Node: -1, CrossSize: 1}, nil), "rank 8: place: node -1"},
		{two(nil, &Place{LocalSize: 2, Cross: 2, CrossSize: 2}), "rank 9: place: cross rank 2 of 2: want 0 to 1"},
		{two(nil, &Place{LocalSize: 2, CrossSize: 0}), "rank 9: place: cross rank 0 of 0"},
		{StartJob{HostEnv: []string{"NOEQUALS"}, Ranks: []RankSpec{{Rank: 4}}}, `rank 4: environment entry "NOEQUALS": want KEY=VALUE`},
	} {
		if err := tc.j.Expand(); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.j, err, tc.want)
		}
	}
}

// FuzzExpand: a StartJob as JSON from the network, expanded, never
// panics; when it is taken, no rank is left in the compact form, every
// merged environment is sorted (as strings, environ.Merge's order) with
// one entry per name, and expanding again changes nothing.
func FuzzExpand(f *testing.F) {
	seed := StartJob{Argv: []string{"python3", "train.py"}, Dir: "/d", HostEnv: []string{"GANGWAY_HOST=a", "X=1"},
		Ranks: []RankSpec{{Rank: 0, LocalRank: 0, Place: &Place{LocalSize: 2, CrossSize: 1}, Env: []string{"X=2"}}, {Rank: 1, LocalRank: 1, Place: &Place{LocalSize: 2, CrossSize: 1}}}}
	b, _ := json.Marshal(seed)
	f.Add(b)
	f.Add([]byte(`{"ranks":[{"rank":3,"place":{"local_size":1,"cross_size":1},"env":["A=1","A=2"]}],"host_env":["=x"]}`))
	f.Add([]byte(`{"ranks":[{"rank":0,"argv":["a"],"env":["B=1"]}]}`))
	f.Add([]byte(`{"argv":[],"ranks":[{"place":{"local_size":-1}}]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var j StartJob
		if json.Unmarshal(in, &j) != nil {
			return
		}
		compact := j.HostEnv != nil || slices.ContainsFunc(j.Ranks, func(r RankSpec) bool { return r.Place != nil })
		if err := j.Expand(); err != nil {
			return
		}
		if j.Argv != nil || j.Dir != "" || j.HostEnv != nil {
			t.Fatalf("job-level compact fields left: %+v", j)
		}
		for _, r := range j.Ranks {
			if r.Place != nil {
				t.Fatalf("rank %d still placed", r.Rank)
			}
			if compact {
				names := make([]string, len(r.Env))
				for i, kv := range r.Env {
					names[i], _, _ = strings.Cut(kv, "=")
				}
				slices.Sort(names)
				if !slices.IsSorted(r.Env) || len(slices.Compact(names)) != len(r.Env) {
					t.Fatalf("rank %d: %q", r.Rank, r.Env)
				}
			}
		}
		again, _ := json.Marshal(j)
		if err := j.Expand(); err != nil {
			t.Fatalf("expanded twice: %v", err)
		}
		if b, _ := json.Marshal(j); string(b) != string(again) {
			t.Fatalf("expanding again changed it:\n%s\n%s", again, b)
		}
	})
}

// TestWithShared: a start that says Shared takes the job frame's Env,
// KillGrace, StdinRank, PMI and Bind; one that carries them itself, names
// another job or came without a job frame is refused; a whole start is
// left as it is. A job frame that carries a host's part is refused.
func TestWithShared(t *testing.T) {
	sh := &StartJob{JobID: "j1", Env: []string{"A=1", "PATH=/bin"}, KillGrace: 5 * time.Second, StdinRank: 3, PMI: &PMIJob{KVSName: "kvs_j1", Size: 16}, Bind: "numa"}
	own := func() StartJob {
		return StartJob{JobID: "j1", Shared: true, Ranks: []RankSpec{{Rank: 8}}, Argv: []string{"python3"}, Dir: "/w", HostEnv: []string{"GANGWAY_HOST=b"}}
	}
	for _, tc := range []struct {
		name string
		j    func() StartJob
		sh   *StartJob
		err  string
	}{
		{"shared", own, sh, ""},
		{"no job frame", own, nil, "did not come before it"},
		{"another job", own, &StartJob{JobID: "j0"}, "another job (j0)"},
		{"env of its own", func() StartJob { j := own(); j.Env = []string{"B=2"}; return j }, sh, "carries env, pmi or bind itself"},
		{"pmi of its own", func() StartJob { j := own(); j.PMI = &PMIJob{}; return j }, sh, "carries env, pmi or bind itself"},
		{"bind of its own", func() StartJob { j := own(); j.Bind = "core"; return j }, sh, "carries env, pmi or bind itself"},
		{"whole", func() StartJob { return StartJob{JobID: "j1", Env: []string{"B=2"}, StdinRank: -1} }, sh, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := tc.j()
			was := j
			err := j.WithShared(tc.sh)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !was.Shared {
				if !slices.Equal(j.Env, was.Env) || j.StdinRank != was.StdinRank {
					t.Fatalf("a whole start changed: %+v", j)
				}
				return
			}
			if j.Shared || !slices.Equal(j.Env, sh.Env) || j.KillGrace != sh.KillGrace || j.StdinRank != 3 || j.PMI != sh.PMI || j.Bind != "numa" ||
				!slices.Equal(j.Argv, was.Argv) || j.Dir != "/w" || !slices.Equal(j.HostEnv, was.HostEnv) || len(j.Ranks) != 1 {
				t.Fatalf("completed start %+v", j)
			}
		})
	}
	for _, tc := range []struct {
		name string
		sh   StartJob
		err  string
	}{
		{"ok", *sh, ""},
		{"no job", StartJob{Env: []string{"A=1"}}, "names no job"},
		{"ranks", StartJob{JobID: "j", Ranks: []RankSpec{{}}}, "a host's part"},
		{"host env", StartJob{JobID: "j", HostEnv: []string{"A=1"}}, "a host's part"},
		{"argv", StartJob{JobID: "j", Argv: []string{"x"}}, "a host's part"},
		{"dir", StartJob{JobID: "j", Dir: "/"}, "a host's part"},
		{"itself shared", StartJob{JobID: "j", Shared: true}, "a host's part"},
	} {
		if err := tc.sh.CheckShared(); (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: CheckShared = %v, want %q", tc.name, err, tc.err)
		}
	}
}

// FuzzWithShared: a job frame and a start from the network, decoded: a
// job frame CheckShared passes and a start WithShared completes leave a
// start that no longer says Shared and whose Env is the job frame's.
func FuzzWithShared(f *testing.F) {
	f.Add([]byte(`{"job_id":"j","env":["A=1"],"kill_grace":5,"stdin_rank":-1,"pmi":{"kvs_name":"k","size":2}}`), []byte(`{"job_id":"j","shared":true,"ranks":[{"rank":0,"argv":["a"]}]}`))
	f.Add([]byte(`{"job_id":"j","ranks":[{}]}`), []byte(`{"job_id":"j","shared":true,"env":["B=1"]}`))
	f.Add([]byte(`{"job_id":"x"}`), []byte(`{"job_id":"y","shared":true}`))
	f.Add([]byte(`null`), []byte(`{"job_id":"j","env":["A=1"]}`))
	f.Fuzz(func(t *testing.T, shIn, jIn []byte) {
		var sh *StartJob
		if json.Unmarshal(shIn, &sh) != nil {
			return
		}
		if sh != nil && sh.CheckShared() != nil {
			return
		}
		var j StartJob
		if json.Unmarshal(jIn, &j) != nil {
			return
		}
		shared := j.Shared
		if err := j.WithShared(sh); err != nil {
			if !shared {
				t.Fatalf("a whole start refused: %v", err)
			}
			return
		}
		if j.Shared {
			t.Fatal("still says Shared")
		}
		if shared && !slices.Equal(j.Env, sh.Env) {
			t.Fatalf("env %q, want the job frame's %q", j.Env, sh.Env)
		}
	})
}
