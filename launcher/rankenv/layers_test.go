package rankenv

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/internal/environ"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/nccl"
)

// varsReference is Vars as it was first written: one map per rank, each
// step setting its names over the one before, sorted at the end. The
// layered Builder (job, host and rank entries merged) must give exactly
// what it gives.
func varsReference(b *Builder, r plan.Rank, forwarded bool) []Var {
	h, j, size := b.hosts[r.Host], b.j, b.size
	m := make(map[string]Var, 40)
	set := func(k, v, src string) { m[k] = Var{k, v, src} }
	if forwarded {
		for _, kv := range j.Forward {
			k, v, _ := strings.Cut(kv, "=")
			set(k, v, SrcForwarded)
		}
	}
	for k, v := range map[string]string{
		"RANK": itoa(r.Rank), "WORLD_SIZE": itoa(size),
		"LOCAL_RANK": itoa(r.LocalRank), "LOCAL_WORLD_SIZE": itoa(r.LocalSize),
		"GROUP_RANK": itoa(r.NodeRank), "GROUP_WORLD_SIZE": itoa(b.groups),
		"ROLE_RANK": itoa(r.Rank), "ROLE_WORLD_SIZE": itoa(size), "ROLE_NAME": "default",
		"MASTER_ADDR": j.MasterAddr, "MASTER_PORT": itoa(j.MasterPort),
		"OMPI_COMM_WORLD_RANK": itoa(r.Rank), "OMPI_COMM_WORLD_SIZE": itoa(size),
		"OMPI_COMM_WORLD_LOCAL_RANK": itoa(r.LocalRank), "OMPI_COMM_WORLD_LOCAL_SIZE": itoa(r.LocalSize),
		"OMPI_COMM_WORLD_NODE_RANK": itoa(r.LocalRank),
		"PMI_RANK":                  itoa(r.Rank), "PMI_SIZE": itoa(size),
		"MPI_LOCALRANKID": itoa(r.LocalRank), "MPI_LOCALNRANKS": itoa(r.LocalSize),
		"HOROVOD_RANK": itoa(r.Rank), "HOROVOD_SIZE": itoa(size),
		"HOROVOD_LOCAL_RANK": itoa(r.LocalRank), "HOROVOD_LOCAL_SIZE": itoa(r.LocalSize),
		"HOROVOD_CROSS_RANK": itoa(b.cross[r.Host][r.LocalRank]),
		"HOROVOD_CROSS_SIZE": itoa(b.crossSize[r.LocalRank]),
		"HOROVOD_HOSTNAME":   h.Name,
		"GANGWAY_JOB_ID":     j.JobID, "GANGWAY_HOST": h.Name,
		"PYTHONUNBUFFERED":           "1",
		"PYTHONFAULTHANDLER":         "1", // Python ranks print their stacks on SIGABRT (hang diagnosis)
		"TORCHELASTIC_RUN_ID":        j.RunID,
		"TORCHELASTIC_RESTART_COUNT": itoa(j.Restart),
		"TORCHELASTIC_MAX_RESTARTS":  itoa(j.MaxRestarts),
	} {
		set(k, v, SrcLauncher)
	}
	if r.GPUs != nil {
		set("CUDA_VISIBLE_DEVICES", nccl.CUDAVisibleDevices(r.GPUs), SrcLauncher)
		set("CUDA_DEVICE_ORDER", "PCI_BUS_ID", SrcLauncher)
	}
	for _, kv := range h.Net {
		k, v, _ := strings.Cut(kv, "=")
		set(k, v, SrcNCCL)
	}
	for _, kv := range j.MCA {
		k, v, _ := strings.Cut(kv, "=")
		set(k, v, SrcMCA)
	}
	for k, v := range j.Vars {
		if userWins(j.Vars, k) {
			set(k, v, cmp.Or(j.Sources[k], cli.SrcX))
		}
	}
	if b.tfCluster != "" {
		// --tf-config wins over -x TF_CONFIG: it asked for this one.
		set("TF_CONFIG", b.tfCluster+itoa(r.Rank)+`},"environment":"cloud"}`, SrcTFConfig)
	}
	out := make([]Var, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b Var) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// TestVarsMatchReference compares the layered Builder with varsReference
// (Vars; and Shared under Own, as the agent puts them together) over
// random jobs whose steps set the same names: -x over the forwarded
// environment, the launcher's and the network's names; -mca and the
// network steps repeating a name (the later wins); -x of identity names
// (refused); GPUs and --tf-config; hosts of 1 to 8 ranks.
func TestVarsMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	pool := []string{"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "MASTER_ADDR", "RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES",
		"HOROVOD_HOSTNAME", "GANGWAY_HOST", "OMPI_MCA_btl", "OMPI_MCA_pml", "PATH", "HOME", "TF_CONFIG", "LOCAL_RANK",
		"PYTHONUNBUFFERED", "A", "Z", "NCCL_DEBUG", "CUDA_DEVICE_ORDER", "GROUP_WORLD_SIZE"}
	pick := func(n int) []string {
		var kv []string
		for range n {
			kv = append(kv, fmt.Sprintf("%s=v%d", pool[rng.IntN(len(pool))], rng.IntN(100)))
		}
		return kv
	}
	for round := range 300 {
		nh := 1 + rng.IntN(5)
		hosts := make([]hostEnv, nh)
		var ranks []plan.Rank
		node := 0
		for h := range hosts {
			hosts[h] = hostEnv{Name: fmt.Sprintf("cn%d", h), Net: pick(rng.IntN(4))}
			n := rng.IntN(9) // a host may run no rank
			for l := range n {
				r := plan.Rank{Rank: len(ranks), Host: h, LocalRank: l, LocalSize: n, NodeRank: node}
				if rng.IntN(2) == 0 {
					r.GPUs = []int{l}
				}
				ranks = append(ranks, r)
			}
			if n > 0 {
				node++
			}
		}
		if len(ranks) == 0 {
			continue
		}
		forward := pick(rng.IntN(6))
		slices.Sort(forward)
		forward = slices.CompactFunc(forward, func(a, b string) bool {
			ka, _, _ := strings.Cut(a, "=")
			kb, _, _ := strings.Cut(b, "=")
			return ka == kb
		})
		j := jobEnv{JobID: "j", MasterAddr: "10.0.0.1", MasterPort: 29500, MCA: pick(rng.IntN(4)), Forward: forward,
			Vars: map[string]string{}, Sources: map[string]string{}, RunID: "run", Restart: rng.IntN(3), MaxRestarts: 3}
		for _, kv := range pick(rng.IntN(5)) {
			k, v, _ := strings.Cut(kv, "=")
			j.Vars[k] = v
			if rng.IntN(2) == 0 {
				j.Sources[k] = cli.SrcEnvFile
			}
		}
		if rng.IntN(4) == 0 {
			j.TFPort = 2222
		}
		b := newBuilder(ranks, hosts, j)
		for _, r := range ranks {
			want := varsReference(b, r, true)
			if got := b.Vars(r); !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d rank %d: Vars\n got %v\nwant %v", round, r.Rank, got, want)
			}
			// What the agent makes of StartJob.Env and RankSpec.Env
			// (environ.Merge, the latter winning) is the whole list.
			wantAll := make([]string, len(want))
			for i, v := range want {
				wantAll[i] = v.Key + "=" + v.Value
			}
			shared, own := b.Shared(), b.Own(r)
			if got := environ.Merge(shared, own); !reflect.DeepEqual(got, wantAll) {
				t.Fatalf("round %d rank %d: Shared under Own\n got %q\nwant %q\nshared %q\nown %q", round, r.Rank, got, wantAll, shared, own)
			}
			// Own carries only the rank's and its host's own names.
			for _, kv := range own {
				k, _, _ := strings.Cut(kv, "=")
				if !ownNames[k] && !slices.ContainsFunc(hosts[r.Host].Net, func(n string) bool { return strings.HasPrefix(n, k+"=") }) {
					t.Fatalf("round %d rank %d: Own has %s, not a rank's or its host's own", round, r.Rank, kv)
				}
			}
		}
	}
}

// ownNames are the names a rank or its host gets other than from its
// network (Net): its identity, GPUs, host name and TF_CONFIG.
var ownNames = map[string]bool{
	"CUDA_DEVICE_ORDER": true, "CUDA_VISIBLE_DEVICES": true, "GROUP_RANK": true, "HOROVOD_CROSS_RANK": true,
	"HOROVOD_CROSS_SIZE": true, "HOROVOD_LOCAL_RANK": true, "HOROVOD_LOCAL_SIZE": true, "HOROVOD_RANK": true,
	"LOCAL_RANK": true, "LOCAL_WORLD_SIZE": true, "MPI_LOCALNRANKS": true, "MPI_LOCALRANKID": true,
	"OMPI_COMM_WORLD_LOCAL_RANK": true, "OMPI_COMM_WORLD_LOCAL_SIZE": true, "OMPI_COMM_WORLD_NODE_RANK": true,
	"OMPI_COMM_WORLD_RANK": true, "PMI_RANK": true, "RANK": true, "ROLE_RANK": true, "TF_CONFIG": true,
	"HOROVOD_HOSTNAME": true, "GANGWAY_HOST": true,
}

// BenchmarkOwn is one rank's environment of an 8-rank host with GPUs, as
// the launcher builds 80,000 of them for 10,000 DGX hosts, under a
// user's shell environment of 100 forwarded variables.
func BenchmarkOwn(b *testing.B) {
	hosts := []hostEnv{{Name: "gpu0001", Net: []string{"NCCL_SOCKET_IFNAME=enp90s0f0", "NCCL_IB_HCA=mlx5_0,mlx5_1"}}, {Name: "gpu0002"}}
	var ranks []plan.Rank
	for h := range hosts {
		for l := range 8 {
			ranks = append(ranks, plan.Rank{Rank: len(ranks), Host: h, LocalRank: l, LocalSize: 8, NodeRank: h, GPUs: []int{l}})
		}
	}
	var forward []string
	for i := range 100 {
		forward = append(forward, fmt.Sprintf("USER_VAR_%03d=/home/user/.local/share/%d", i, i))
	}
	j := jobEnv{JobID: "j", MasterAddr: "10.0.0.1", MasterPort: 29500, MCA: []string{"OMPI_MCA_btl=^openib"},
		Vars: map[string]string{"NCCL_DEBUG": "WARN"}, RunID: "run", Forward: forward}
	bl := newBuilder(ranks, hosts, j)
	b.ReportAllocs()
	for i := range b.N {
		_ = bl.Own(ranks[i%len(ranks)])
	}
}
