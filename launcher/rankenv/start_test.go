package rankenv

import (
	"encoding/json"
	"slices"
	"testing"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/environ"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/plan"
)

// TestCompactStart: a host's compact start (HostOwn once, Place and
// RankOwn per rank, the command once), expanded as the agent expands it
// (wire.StartJob.Expand), gives every rank exactly the command,
// directory and environment of the whole form (Builder.Own), and both,
// over Shared as the agent puts them, are what --dry-run shows
// (Builder.Vars): under a user's environment that already sets rank and
// network variables, -x that overrides the host's network choice and
// the GPUs, -mca, --tf-config and -wdir, with hosts of uneven ranks (so
// that the cross sizes differ by local rank).
func TestCompactStart(t *testing.T) {
	environ0 := []string{"HOME=/home/ana", "PATH=/opt/conda/bin:/usr/bin", "RANK=99", "LOCAL_RANK=7",
		"GANGWAY_HOST=login1", "NCCL_IB_HCA=mlx5_9", "CUDA_VISIBLE_DEVICES=3", "CONDA_PREFIX=/opt/conda"}
	for _, args := range [][]string{
		nil,
		{"-x", "NCCL_SOCKET_IFNAME=eth9", "-x", "CUDA_VISIBLE_DEVICES=0", "-x", "FOO=bar"},
		{"-mca", "btl", "tcp,self", "--tf-config", "2222", "-wdir", "/scratch/run1"},
		{"-genvnone", "-x", "NCCL_IB_HCA=mlx5_0"},
	} {
		hosts := hostPair("enp1s0f0", func(_ int, reached string) []string { return []string{reached + "/24"} })
		for i := range hosts {
			for g := range 8 {
				hosts[i].Facts.GPUs = append(hosts[i].Facts.GPUs, wire.GPU{Index: g})
			}
		}
		// Three ranks on cn1, five on cn2: local ranks 3 and 4 are on one
		// host, 0 to 2 on both.
		var ranks []plan.Rank
		for r := range 8 {
			if r < 3 {
				ranks = append(ranks, rk(r, 0, r, 3, 0))
			} else {
				ranks = append(ranks, rk(r, 1, r-3, 5, 1))
			}
		}
		cfg, err := cli.Parse(append(append([]string{"-np", "8", "-H", "cn1:3,cn2:5"}, args...), "python3", "train.py", "--epochs", "1"),
			func(string) string { return "" }, environ0)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		a, err := Prepare(cfg, ranks, hosts, "j1", 0, zap.NewNop())
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		whole, err := a.Starts([]bool{false, false})
		if err != nil {
			t.Fatal(err)
		}
		compact, err := a.Starts([]bool{true, true})
		if err != nil {
			t.Fatal(err)
		}
		for h := range hosts {
			if whole[h].Compact || whole[h].HostEnv != nil || whole[h].Argv != nil || !compact[h].Compact || !slices.Equal(compact[h].Argv, cfg.Argv) || compact[h].Dir != cfg.Env.Dir {
				t.Fatalf("%q host %d: forms %+v / %+v", args, h, whole[h], compact[h])
			}
			sj := wire.StartJob{Argv: compact[h].Argv, Dir: compact[h].Dir, HostEnv: compact[h].HostEnv, Ranks: compact[h].Ranks}
			// Through JSON, as it travels.
			b, err := json.Marshal(sj)
			if err != nil {
				t.Fatal(err)
			}
			var got wire.StartJob
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if err := got.Expand(); err != nil {
				t.Fatalf("%q host %d: %v", args, h, err)
			}
			if len(got.Ranks) != len(whole[h].Ranks) {
				t.Fatalf("%q host %d: %d ranks, want %d", args, h, len(got.Ranks), len(whole[h].Ranks))
			}
			for i, r := range got.Ranks {
				w := whole[h].Ranks[i]
				if r.Rank != w.Rank || r.LocalRank != w.LocalRank || !slices.Equal(r.Argv, w.Argv) || r.Dir != w.Dir || !slices.Equal(r.GPUs, w.GPUs) || r.Place != nil {
					t.Errorf("%q rank %d: compact %+v, whole %+v", args, w.Rank, r, w)
				}
				if !slices.Equal(r.Env, w.Env) {
					t.Errorf("%q rank %d: compact form's environment\n%q\nwhole form's\n%q", args, w.Rank, r.Env, w.Env)
				}
				var dry []string
				for _, v := range a.b.Vars(ranks[w.Rank]) {
					dry = append(dry, v.Key+"="+v.Value)
				}
				if run := environ.Merge(a.Shared, r.Env); !slices.Equal(run, dry) {
					t.Errorf("%q rank %d: run's environment\n%q\n--dry-run's\n%q", args, w.Rank, run, dry)
				}
			}
		}
		// What the rules above decided, seen in one rank: its identity is
		// the launcher's, the host's network choice loses to -x.
		env := environ.Merge(a.Shared, whole[1].Ranks[4].Env) // rank 7, local rank 4 of 5
		for _, want := range []string{"RANK=7", "LOCAL_RANK=4", "LOCAL_WORLD_SIZE=5", "GROUP_RANK=1", "HOROVOD_CROSS_SIZE=1", "GANGWAY_HOST=cn2"} {
			if !slices.Contains(env, want) {
				t.Errorf("%q: rank 7 lacks %s: %q", args, want, env)
			}
		}
		if slices.Contains(args, "NCCL_SOCKET_IFNAME=eth9") != slices.Contains(env, "NCCL_SOCKET_IFNAME=eth9") {
			t.Errorf("%q: rank 7's NCCL_SOCKET_IFNAME: %q", args, env)
		}
	}
}

// TestCompactStartSmaller: at eight ranks a host, a DGX's shape, the
// compact start is well under half of the whole one's bytes beyond what
// both share.
func TestCompactStartSmaller(t *testing.T) {
	hosts := hostPair("enp1s0f0", func(_ int, reached string) []string { return []string{reached + "/24"} })
	var ranks []plan.Rank
	for r := range 16 {
		ranks = append(ranks, rk(r, r/8, r%8, 8, r/8))
	}
	cfg, err := cli.Parse([]string{"-np", "16", "-H", "cn1:8,cn2:8", "python3", "train.py"}, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Prepare(cfg, ranks, hosts, "j1", 0, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	size := func(compact bool) int {
		starts, err := a.Starts([]bool{compact, compact})
		if err != nil {
			t.Fatal(err)
		}
		sj := wire.StartJob{Ranks: starts[0].Ranks, Argv: starts[0].Argv, HostEnv: starts[0].HostEnv}
		b, _ := json.Marshal(sj)
		return len(b)
	}
	if c, w := size(true), size(false); c*2 > w {
		t.Errorf("compact start %d bytes, whole %d", c, w)
	} else {
		t.Logf("8 ranks' start beyond the shared environment: compact %d bytes, whole %d", c, w)
	}
}

// TestIdentityNamesAreIdentity: every variable an agent builds for a
// rank (wire.Identity) is one -x cannot change (plan.IsIdentity): were
// one not, -x would win it in the whole form, where the launcher merges,
// and lose it in the compact one, where the agent builds it over HostEnv.
func TestIdentityNamesAreIdentity(t *testing.T) {
	n := 0
	wire.Identity(3, 1, wire.Place{Node: 1, LocalSize: 2, Cross: 0, CrossSize: 1}, func(k, _ string) {
		n++
		if !plan.IsIdentity(k) {
			t.Errorf("%s is built at the host but -x may set it (plan.IsIdentity)", k)
		}
	})
	if n != 17 {
		t.Errorf("%d identity variables, want 17", n)
	}
}
