package rankenv

import (
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/nccl"
)

// envMap turns KEY=VALUE entries into a map, failing on a repeated key.
func envMap(t *testing.T, env []string) map[string]string {
	t.Helper()
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("entry %q has no =", kv)
		}
		if _, dup := m[k]; dup {
			t.Fatalf("key %s appears twice", k)
		}
		m[k] = v
	}
	return m
}

// identity is what docs/environment.md says one rank must see.
type identity struct {
	rank, size, local, localSize, node, nodes, cross, crossSize int
	host                                                        string
}

// wantIdentity lists the variables every rank gets from its identity,
// following the issue's list. OMPI_COMM_WORLD_NODE_RANK is Open MPI's "rank
// on this node across all jobs", which for one job is the local rank.
func wantIdentity(id identity, masterAddr, masterPort, jobID string) map[string]string {
	s := itoa
	return map[string]string{
		"OMPI_COMM_WORLD_RANK":       s(id.rank),
		"OMPI_COMM_WORLD_SIZE":       s(id.size),
		"OMPI_COMM_WORLD_LOCAL_RANK": s(id.local),
		"OMPI_COMM_WORLD_LOCAL_SIZE": s(id.localSize),
		"OMPI_COMM_WORLD_NODE_RANK":  s(id.local),
		"PMI_RANK":                   s(id.rank),
		"PMI_SIZE":                   s(id.size),
		"MPI_LOCALRANKID":            s(id.local),
		"MPI_LOCALNRANKS":            s(id.localSize),
		"RANK":                       s(id.rank),
		"WORLD_SIZE":                 s(id.size),
		"LOCAL_RANK":                 s(id.local),
		"LOCAL_WORLD_SIZE":           s(id.localSize),
		"GROUP_RANK":                 s(id.node),
		"GROUP_WORLD_SIZE":           s(id.nodes),
		"ROLE_RANK":                  s(id.rank),
		"ROLE_WORLD_SIZE":            s(id.size),
		"ROLE_NAME":                  "default",
		"MASTER_ADDR":                masterAddr,
		"MASTER_PORT":                masterPort,
		"HOROVOD_RANK":               s(id.rank),
		"HOROVOD_SIZE":               s(id.size),
		"HOROVOD_LOCAL_RANK":         s(id.local),
		"HOROVOD_LOCAL_SIZE":         s(id.localSize),
		"HOROVOD_CROSS_RANK":         s(id.cross),
		"HOROVOD_CROSS_SIZE":         s(id.crossSize),
		"HOROVOD_HOSTNAME":           id.host,
		"GANGWAY_JOB_ID":             jobID,
		"GANGWAY_HOST":               id.host,
		"PYTHONUNBUFFERED":           "1",
		"PYTHONFAULTHANDLER":         "1",
		"TORCHELASTIC_RUN_ID":        "",
		"TORCHELASTIC_RESTART_COUNT": "0",
		"TORCHELASTIC_MAX_RESTARTS":  "0",
	}
}

func TestEnvironTwoByTwo(t *testing.T) {
	ranks := []plan.Rank{rk(0, 0, 0, 2, 0), rk(1, 0, 1, 2, 0), rk(2, 1, 0, 2, 1), rk(3, 1, 1, 2, 1)}
	hosts := []hostEnv{{Name: "a"}, {Name: "b"}}
	envs := rankEnvs(ranks, hosts, jobEnv{JobID: "j1", MasterAddr: "10.0.0.1", MasterPort: 29500})
	if len(envs) != 4 {
		t.Fatalf("got %d environments, want 4", len(envs))
	}
	// Rank 3 written out in full, in the sorted order the runner passes on.
	want3 := []string{
		"GANGWAY_HOST=b",
		"GANGWAY_JOB_ID=j1",
		"GROUP_RANK=1",
		"GROUP_WORLD_SIZE=2",
		"HOROVOD_CROSS_RANK=1",
		"HOROVOD_CROSS_SIZE=2",
		"HOROVOD_HOSTNAME=b",
		"HOROVOD_LOCAL_RANK=1",
		"HOROVOD_LOCAL_SIZE=2",
		"HOROVOD_RANK=3",
		"HOROVOD_SIZE=4",
		"LOCAL_RANK=1",
		"LOCAL_WORLD_SIZE=2",
		"MASTER_ADDR=10.0.0.1",
		"MASTER_PORT=29500",
		"MPI_LOCALNRANKS=2",
		"MPI_LOCALRANKID=1",
		"OMPI_COMM_WORLD_LOCAL_RANK=1",
		"OMPI_COMM_WORLD_LOCAL_SIZE=2",
		"OMPI_COMM_WORLD_NODE_RANK=1",
		"OMPI_COMM_WORLD_RANK=3",
		"OMPI_COMM_WORLD_SIZE=4",
		"PMI_RANK=3",
		"PMI_SIZE=4",
		"PYTHONFAULTHANDLER=1",
		"PYTHONUNBUFFERED=1",
		"RANK=3",
		"ROLE_NAME=default",
		"ROLE_RANK=3",
		"ROLE_WORLD_SIZE=4",
		"TORCHELASTIC_MAX_RESTARTS=0",
		"TORCHELASTIC_RESTART_COUNT=0",
		"TORCHELASTIC_RUN_ID=",
		"WORLD_SIZE=4",
	}
	if !reflect.DeepEqual(envs[3], want3) {
		t.Errorf("rank 3 environment:\n got %q\nwant %q", envs[3], want3)
	}
	ids := []identity{
		{0, 4, 0, 2, 0, 2, 0, 2, "a"},
		{1, 4, 1, 2, 0, 2, 0, 2, "a"},
		{2, 4, 0, 2, 1, 2, 1, 2, "b"},
		{3, 4, 1, 2, 1, 2, 1, 2, "b"},
	}
	for r, id := range ids {
		if !sort.StringsAreSorted(envs[r]) {
			t.Errorf("rank %d environment is not sorted: %q", r, envs[r])
		}
		if got, want := envMap(t, envs[r]), wantIdentity(id, "10.0.0.1", "29500", "j1"); !reflect.DeepEqual(got, want) {
			t.Errorf("rank %d:\n got %v\nwant %v", r, got, want)
		}
	}
}

// TestEnvironUneven checks the cross (Horovod) and group (torchrun)
// numbers when hosts hold different numbers of ranks.
func TestEnvironUneven(t *testing.T) {
	tests := []struct {
		name  string
		ranks []plan.Rank
		hosts []hostEnv
		want  []identity
	}{
		{
			// -map-by node over a:2,b:3,c:1 with -np 5 (see TestPlan).
			name: "map-by node",
			ranks: []plan.Rank{
				rk(0, 0, 0, 2, 0), rk(1, 1, 0, 2, 1), rk(2, 2, 0, 1, 2),
				rk(3, 0, 1, 2, 0), rk(4, 1, 1, 2, 1),
			},
			hosts: []hostEnv{{Name: "a"}, {Name: "b"}, {Name: "c"}},
			want: []identity{
				{0, 5, 0, 2, 0, 3, 0, 3, "a"},
				{1, 5, 0, 2, 1, 3, 1, 3, "b"},
				{2, 5, 0, 1, 2, 3, 2, 3, "c"},
				{3, 5, 1, 2, 0, 3, 0, 2, "a"},
				{4, 5, 1, 2, 1, 3, 1, 2, "b"},
			},
		},
		{
			// -map-by slot over a:3,b:1.
			name:  "map-by slot, uneven",
			ranks: []plan.Rank{rk(0, 0, 0, 3, 0), rk(1, 0, 1, 3, 0), rk(2, 0, 2, 3, 0), rk(3, 1, 0, 1, 1)},
			hosts: []hostEnv{{Name: "a"}, {Name: "b"}},
			want: []identity{
				{0, 4, 0, 3, 0, 2, 0, 2, "a"},
				{1, 4, 1, 3, 0, 2, 0, 1, "a"},
				{2, 4, 2, 3, 0, 2, 0, 1, "a"},
				{3, 4, 0, 1, 1, 2, 1, 2, "b"},
			},
		},
		{
			// The first host has fewer ranks than the second: cross ranks
			// of local rank 1 start at the second host.
			name:  "short first host",
			ranks: []plan.Rank{rk(0, 0, 0, 1, 0), rk(1, 1, 0, 2, 1), rk(2, 1, 1, 2, 1), rk(3, 2, 0, 2, 2), rk(4, 2, 1, 2, 2)},
			hosts: []hostEnv{{Name: "a"}, {Name: "b"}, {Name: "c"}},
			want: []identity{
				{0, 5, 0, 1, 0, 3, 0, 3, "a"},
				{1, 5, 0, 2, 1, 3, 1, 3, "b"},
				{2, 5, 1, 2, 1, 3, 0, 2, "b"},
				{3, 5, 0, 2, 2, 3, 2, 3, "c"},
				{4, 5, 1, 2, 2, 3, 1, 2, "c"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			envs := rankEnvs(tt.ranks, tt.hosts, jobEnv{JobID: "j", MasterAddr: "m", MasterPort: 1})
			for r, id := range tt.want {
				if got, want := envMap(t, envs[r]), wantIdentity(id, "m", "1", "j"); !reflect.DeepEqual(got, want) {
					t.Errorf("rank %d:\n got %v\nwant %v", r, got, want)
				}
			}
		})
	}
}

// TestEnvironPlanned runs rankEnvs on Plan's output for map-by node.
func TestEnvironPlanned(t *testing.T) {
	ranks, err := plan.Ranks(hs(2, 3, 1), 5, plan.Options{MapBy: "node"})
	if err != nil {
		t.Fatal(err)
	}
	envs := rankEnvs(ranks, []hostEnv{{Name: "a"}, {Name: "b"}, {Name: "c"}}, jobEnv{})
	// rank, host, local rank, cross rank, cross size
	want := [][5]string{
		{"0", "a", "0", "0", "3"},
		{"1", "b", "0", "1", "3"},
		{"2", "c", "0", "2", "3"},
		{"3", "a", "1", "0", "2"},
		{"4", "b", "1", "1", "2"},
	}
	for r, w := range want {
		m := envMap(t, envs[r])
		got := [5]string{m["RANK"], m["HOROVOD_HOSTNAME"], m["LOCAL_RANK"], m["HOROVOD_CROSS_RANK"], m["HOROVOD_CROSS_SIZE"]}
		if got != w {
			t.Errorf("rank %d: (RANK, HOROVOD_HOSTNAME, LOCAL_RANK, HOROVOD_CROSS_RANK, HOROVOD_CROSS_SIZE) = %v, want %v", r, got, w)
		}
	}
}

func TestEnvironUserMCANet(t *testing.T) {
	ranks := []plan.Rank{rk(0, 0, 0, 1, 0), rk(1, 1, 0, 1, 1)}
	hosts := []hostEnv{{Name: "a", Net: []string{"NCCL_SOCKET_IFNAME=eth0", "FOO=from-net"}}, {Name: "b"}}
	j := jobEnv{
		JobID: "j", MasterAddr: "m", MasterPort: 29500,
		MCA: []string{"OMPI_MCA_btl=tcp,self", "OMPI_MCA_pml=ob1"},
		Vars: map[string]string{
			"RANK": "99", "WORLD_SIZE": "1", "LOCAL_RANK": "7", "OMPI_COMM_WORLD_RANK": "5", "HOROVOD_HOSTNAME": "x",
			"PMI_RANK": "3", "GANGWAY_JOB_ID": "evil", "GROUP_RANK": "9",
			"MASTER_PORT": "1234", "FOO": "bar", "OMPI_MCA_pml": "ucx", "PYTHONUNBUFFERED": "0", "EMPTY": "",
		},
	}
	envs := rankEnvs(ranks, hosts, j)
	for r, host := range []string{"a", "b"} {
		m := envMap(t, envs[r])
		want := map[string]string{
			"RANK": itoa(r), "WORLD_SIZE": "2", "LOCAL_RANK": "0", "OMPI_COMM_WORLD_RANK": itoa(r),
			"HOROVOD_HOSTNAME": host, "PMI_RANK": itoa(r), "GANGWAY_JOB_ID": "j", "GROUP_RANK": itoa(r),
			"MASTER_PORT": "1234", "FOO": "bar", "OMPI_MCA_btl": "tcp,self", "OMPI_MCA_pml": "ucx",
			"PYTHONUNBUFFERED": "0", "EMPTY": "",
		}
		for k, v := range want {
			if got, ok := m[k]; !ok || got != v {
				t.Errorf("rank %d: %s=%q (set %v), want %q", r, k, got, ok, v)
			}
		}
		if !sort.StringsAreSorted(envs[r]) {
			t.Errorf("rank %d environment is not sorted", r)
		}
	}
	if m := envMap(t, envs[0]); m["NCCL_SOCKET_IFNAME"] != "eth0" {
		t.Errorf("host a: NCCL_SOCKET_IFNAME=%q, want eth0", m["NCCL_SOCKET_IFNAME"])
	}
	if m := envMap(t, envs[1]); m["NCCL_SOCKET_IFNAME"] != "" {
		t.Errorf("host b got host a's NCCL_SOCKET_IFNAME=%q", m["NCCL_SOCKET_IFNAME"])
	}
}

func TestEnvironPythonUnbufferedDefault(t *testing.T) {
	envs := rankEnvs([]plan.Rank{rk(0, 0, 0, 1, 0)}, []hostEnv{{Name: "a"}}, jobEnv{Vars: map[string]string{"X": "1"}})
	if !slices.Contains(envs[0], "PYTHONUNBUFFERED=1") {
		t.Errorf("PYTHONUNBUFFERED=1 missing: %q", envs[0])
	}
}

// gpuHost is a host whose agent reported GPUs with these indices.
func gpuHost(name string, idx ...int) Host {
	s := Host{Host: hostfile.Host{Name: name}}
	for _, g := range idx {
		s.Facts.GPUs = append(s.Facts.GPUs, wire.GPU{Index: g})
	}
	return s
}

// TestAssignGPUs checks each rank's GPUs, chosen once, and the
// CUDA_VISIBLE_DEVICES that rankEnvs builds from them.
func TestAssignGPUs(t *testing.T) {
	two := func() []plan.Rank { return []plan.Rank{rk(0, 0, 0, 2, 0), rk(1, 0, 1, 2, 0)} }
	tests := []struct {
		name    string
		ranks   []plan.Rank
		reached []Host
		gpusPer int
		want    []string // CUDA_VISIBLE_DEVICES per rank; "-" for unset
	}{
		{"one per local rank", two(), []Host{gpuHost("a", 0, 1, 2, 3)}, 1, []string{"0", "1"}},
		{"GPUsPer 0 means 1", two(), []Host{gpuHost("a", 0, 1)}, 0, []string{"0", "1"}},
		{"host's visible GPU ids, not positions", two(), []Host{gpuHost("a", 3, 5)}, 1, []string{"3", "5"}},
		{"--gpus-per-rank 2", two(), []Host{gpuHost("a", 0, 1, 2, 3)}, 2, []string{"0,1", "2,3"}},
		{"no GPUs leaves it unset", two(), []Host{gpuHost("a")}, 1, []string{"-", "-"}},
		{"by local rank on each host", []plan.Rank{rk(0, 0, 0, 1, 0), rk(1, 1, 0, 2, 1), rk(2, 1, 1, 2, 1), rk(3, 2, 0, 1, 2)},
			[]Host{gpuHost("a", 0), gpuHost("b", 0, 1), gpuHost("c")}, 1,
			[]string{"0", "0", "1", "-"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := assignGPUs(cli.Placement{GPUsPer: tt.gpusPer}, tt.ranks, tt.reached); err != nil {
				t.Fatal(err)
			}
			hosts := make([]hostEnv, len(tt.reached))
			for i, s := range tt.reached {
				hosts[i] = hostEnv{Name: s.Name}
			}
			envs := rankEnvs(tt.ranks, hosts, jobEnv{})
			for r, want := range tt.want {
				m := envMap(t, envs[r])
				got, ok := m["CUDA_VISIBLE_DEVICES"]
				if !ok {
					got = "-"
				}
				if got != want {
					t.Errorf("rank %d: CUDA_VISIBLE_DEVICES=%q, want %q", r, got, want)
				}
				if order, ok := m["CUDA_DEVICE_ORDER"]; (want != "-") != ok || ok && order != "PCI_BUS_ID" {
					t.Errorf("rank %d: CUDA_DEVICE_ORDER=%q (set %v) with CUDA_VISIBLE_DEVICES %q", r, order, ok, want)
				}
				if got, want := nccl.CUDAVisibleDevices(tt.ranks[r].GPUs), strings.TrimPrefix(want, "-"); got != want {
					t.Errorf("rank %d: GPUs %v, want %q: StartJob would bind to other GPUs than the environment names", r, tt.ranks[r].GPUs, want)
				}
			}
		})
	}
}

func TestAssignTooFewGPUs(t *testing.T) {
	tests := []struct {
		name    string
		gpus    []int
		gpusPer int
		filter  plan.GPUFilter
		wantMsg string
	}{
		{"one GPU, two ranks", []int{0}, 1, plan.GPUFilter{}, "host gpu0: 2 ranks x 1 GPU need 2 GPUs, 1 available ([0])"},
		{"three GPUs, two ranks x 2", []int{0, 1, 2}, 2, plan.GPUFilter{}, "host gpu0: 2 ranks x 2 GPUs need 4 GPUs, 3 available ([0 1 2])"},
		{"--gpus keeps one", []int{0, 1, 2}, 1, plan.GPUFilter{All: []int{2}}, "need 2 GPUs, 1 available ([2])"},
	}
	for _, tt := range tests {
		ranks := []plan.Rank{rk(0, 0, 0, 2, 0), rk(1, 0, 1, 2, 0)}
		err := assignGPUs(cli.Placement{GPUsPer: tt.gpusPer, GPUs: tt.filter}, ranks, []Host{gpuHost("gpu0", tt.gpus...)})
		if err == nil || !strings.Contains(err.Error(), tt.wantMsg) {
			t.Errorf("%s: assignGPUs error %v, want one containing %q", tt.name, err, tt.wantMsg)
		}
	}
}

// TestTFConfig: --tf-config gives every rank TFJob's TF_CONFIG: the same
// worker list (rank order, each on its host's data address at the port
// plus its local rank) and its own index; -x TF_CONFIG loses to it.
func TestTFConfig(t *testing.T) {
	ranks := []plan.Rank{rk(0, 0, 0, 2, 0), rk(1, 0, 1, 2, 0), rk(2, 1, 0, 2, 1), rk(3, 1, 1, 2, 1)}
	hosts := []hostEnv{{Name: "a", Addr: "10.0.0.1"}, {Name: "b"}}
	envs := rankEnvs(ranks, hosts, jobEnv{TFPort: 2222, Vars: map[string]string{"TF_CONFIG": "{}"}})
	for r, env := range envs {
		var got string
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, "TF_CONFIG="); ok {
				got = v
			}
		}
		var tf struct {
			Cluster map[string][]string `json:"cluster"`
			Task    struct {
				Type  string `json:"type"`
				Index int    `json:"index"`
			} `json:"task"`
			Environment string `json:"environment"`
		}
		if err := json.Unmarshal([]byte(got), &tf); err != nil {
			t.Fatalf("rank %d: TF_CONFIG %q: %v", r, got, err)
		}
		want := []string{"10.0.0.1:2222", "10.0.0.1:2223", "b:2222", "b:2223"}
		if !slices.Equal(tf.Cluster["worker"], want) || len(tf.Cluster) != 1 || tf.Task.Type != "worker" || tf.Task.Index != r || tf.Environment != "cloud" {
			t.Errorf("rank %d: TF_CONFIG %s, want workers %v and index %d", r, got, want, r)
		}
	}
	for _, kv := range rankEnvs(ranks, hosts, jobEnv{})[0] {
		if strings.HasPrefix(kv, "TF_CONFIG=") {
			t.Errorf("TF_CONFIG set without --tf-config: %s", kv)
		}
	}
}

// hs builds hosts h0, h1, ... with the given slots.
func hs(slots ...int) []hostfile.Host {
	out := make([]hostfile.Host, len(slots))
	for i, s := range slots {
		out[i] = hostfile.Host{Name: "h" + itoa(i), Slots: s}
	}
	return out
}

// rk is a Rank written compactly: rank, host, local rank, local size, node rank.
func rk(rank, host, local, localSize, node int) plan.Rank {
	return plan.Rank{Rank: rank, Host: host, LocalRank: local, LocalSize: localSize, NodeRank: node}
}

// TestNewJobEnv: one constructor for a run and a dry run: the master's
// address and free port unless --master-addr and --master-port, the
// default port when the host gave none, the job's id as the run's
// without --run-id.
func TestNewJobEnv(t *testing.T) {
	cfg := parse(t)
	if j := newJobEnv(cfg, "dry-run", 0, "a", 0); j.MasterAddr != "a" || j.MasterPort != defaultMasterPort || j.RunID != "dry-run" {
		t.Errorf("dry run: %+v", j)
	}
	cfg = parse(t, "--master-addr", "10.0.0.9", "--master-port", "1234", "--run-id", "r", "--max-restarts", "3")
	if j := newJobEnv(cfg, "j1", 2, "a", 40000); j.MasterAddr != "10.0.0.9" || j.MasterPort != 1234 || j.RunID != "r" || j.Restart != 2 || j.MaxRestarts != 3 {
		t.Errorf("flags: %+v", j)
	}
	if j := newJobEnv(parse(t), "j1", 0, "a", 40000); j.MasterPort != 40000 {
		t.Errorf("free port: %+v", j)
	}
}

// TestCheckNCCL: the user's NCCL variables are judged against every
// host's interfaces.
func TestCheckNCCL(t *testing.T) {
	a := Host{Host: hostfile.Host{Name: "a"}, Facts: wire.Facts{NICs: []wire.NIC{{Name: "eth0", Up: true, Addrs: []string{"10.0.0.1/24"}}}}}
	b := Host{Host: hostfile.Host{Name: "b"}, Facts: wire.Facts{NICs: []wire.NIC{{Name: "ib0", Up: true, Addrs: []string{"10.1.0.1/24"}}}}}
	probs := CheckNCCL(map[string]string{"NCCL_SOCKET_IFNAME": "eth", "PATH": "/bin"}, []Host{a, b})
	if len(probs) != 1 || probs[0].Error() != `host b: NCCL_SOCKET_IFNAME="eth": selects no up interface with an address (up: ib0)` {
		t.Errorf("got %v", probs)
	}
}

// TestNCCLWarnings: a variable's problems on one host each are worded for
// the first few hosts, then counted.
func TestNCCLWarnings(t *testing.T) {
	var hosts []Host
	for i := range 5 {
		hosts = append(hosts, Host{Host: hostfile.Host{Name: "h" + itoa(i)}, Facts: wire.Facts{NICs: []wire.NIC{{Name: "eth0", Up: true, Addrs: []string{"10.0.0.1/24"}}}}})
	}
	got := NCCLWarnings(map[string]string{"NCCL_SOCKET_IFNAME": "ib", "NCCL_DEBUG": "LOUD"}, hosts)
	want := []string{
		`NCCL_DEBUG="LOUD": unknown level; want one of VERSION, WARN, INFO, ABORT, TRACE`,
		`host h0: NCCL_SOCKET_IFNAME="ib": selects no up interface with an address (up: eth0)`,
		`host h1: NCCL_SOCKET_IFNAME="ib": selects no up interface with an address (up: eth0)`,
		`host h2: NCCL_SOCKET_IFNAME="ib": selects no up interface with an address (up: eth0)`,
		`NCCL_SOCKET_IFNAME="ib": the same on 2 more hosts`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// rankEnvs builds every rank's environment (Builder.Vars has the order of
// precedence). The result is indexed by rank; each entry is sorted
// KEY=VALUE. The host's own environment (the agent's) is the base the
// ranks start from.
func rankEnvs(ranks []plan.Rank, hosts []hostEnv, j jobEnv) [][]string {
	b := newBuilder(ranks, hosts, j)
	out := make([][]string, len(ranks))
	for _, r := range ranks {
		out[r.Rank] = b.Rank(r)
	}
	return out
}
