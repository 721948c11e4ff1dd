package health

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// hgx is an HGX H100 host's facts as its agent reports them: 8 GPUs
// counted, the agent's checks all passing, 8 NDR InfiniBand ports (one
// per GPU, mlx5_0..mlx5_7 as on a DGX H100) and a RoCE port that is down
// (a storage NIC's second port, which NCCL does not use): the ports are
// what agent/facts reads from its testdata/ib-hgx-h100 sysfs fixture
// (TestListHCAsHGX), and the "ib down" and "ib slow" cases below are its
// -down and -slow variants.
func hgx(name string) wire.Facts {
	f := wire.Facts{Name: name, Health: &wire.Health{GPUs: 8, Checks: []wire.Check{
		{Name: wire.CheckGPUDriver, Status: wire.CheckOK}, {Name: wire.CheckGPUBusy, Status: wire.CheckOK},
		{Name: wire.CheckGPUECC, Status: wire.CheckOK}, {Name: wire.CheckGPURemap, Status: wire.CheckOK},
		{Name: wire.CheckGPURetired, Status: wire.CheckNotChecked}, {Name: wire.CheckTmpDir, Status: wire.CheckOK},
	}}}
	for i := range 8 {
		f.HCAs = append(f.HCAs, wire.HCA{Name: fmt.Sprintf("mlx5_%d", i), Port: 1, State: "ACTIVE", LinkLayer: "InfiniBand",
			RateGbps: 400, Netdev: fmt.Sprintf("ibp%ds0", i), NUMANode: i / 4})
	}
	f.HCAs = append(f.HCAs, wire.HCA{Name: "mlx5_8", Port: 1, State: "DOWN", LinkLayer: "Ethernet", RateGbps: 10, Netdev: "enp170s0f1np1"})
	return f
}

// dgx is a DGX A100: 8 GPUs, 8 HDR ports at 200 Gb/s.
func dgx(name string) wire.Facts {
	f := hgx(name)
	for i := range f.HCAs {
		if f.HCAs[i].RateGbps == 400 {
			f.HCAs[i].RateGbps = 200
		}
	}
	return f
}

func cluster(build func(string) wire.Facts, n int, change func([]wire.Facts)) ([]string, []wire.Facts) {
	names := make([]string, n)
	facts := make([]wire.Facts, n)
	for i := range n {
		names[i] = fmt.Sprintf("node%d", i)
		facts[i] = build(names[i])
	}
	if change != nil {
		change(facts)
	}
	return names, facts
}

// verdicts is "host: check: detail" for every failed check.
func verdicts(hosts []Host) string {
	var out []string
	for _, h := range hosts {
		for _, c := range h.Failed() {
			out = append(out, h.Name+": "+c.Name+": "+c.Detail)
		}
	}
	return strings.Join(out, "\n")
}

func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		name   string
		make   func(string) wire.Facts
		n      int
		o      Options
		change func([]wire.Facts)
		want   string
	}{
		{name: "hgx healthy", make: hgx, n: 4},
		{name: "dgx healthy", make: dgx, n: 4, o: Options{GPUsPerHost: 8}},
		{name: "one host", make: hgx, n: 1},
		{name: "gpu missing", make: dgx, n: 4, change: func(f []wire.Facts) { f[2].Health.GPUs = 7 },
			want: "node2: gpu-count: 7 GPUs, want 8 (as on 3 of 4 hosts)"},
		{name: "gpu missing of two", make: dgx, n: 2, change: func(f []wire.Facts) { f[1].Health.GPUs = 7 },
			want: "node1: gpu-count: 7 GPUs, want 8 (as on 1 of 2 hosts)"},
		{name: "gpus per host", make: hgx, n: 2, o: Options{GPUsPerHost: 16},
			want: "node0: gpu-count: 8 GPUs, want 16 (--gpus-per-host)\nnode1: gpu-count: 8 GPUs, want 16 (--gpus-per-host)"},
		{name: "more gpus than most", make: hgx, n: 3, change: func(f []wire.Facts) { f[0].Health.GPUs = 9 }},
		{name: "no nvidia-smi", make: hgx, n: 2, o: Options{GPUsPerHost: 8}, change: func(f []wire.Facts) { f[0].Health.GPUs, f[1].Health.GPUs = -1, -1 }},
		{name: "ib down", make: hgx, n: 4, change: func(f []wire.Facts) { f[3].HCAs[5].State, f[3].HCAs[5].RateGbps = "DOWN", 10 },
			want: "node3: ib: mlx5_5:1 is DOWN (ACTIVE on 3 of 4 hosts)"},
		{name: "ib down of two", make: hgx, n: 2, change: func(f []wire.Facts) { f[0].HCAs[0].State = "INIT" },
			want: "node0: ib: mlx5_0:1 is INIT (ACTIVE on 1 of 2 hosts)"},
		{name: "ib slow", make: hgx, n: 4, change: func(f []wire.Facts) { f[1].HCAs[2].RateGbps = 200 },
			want: "node1: ib: mlx5_2:1 runs at 200 Gb/s, the others at 400 Gb/s"},
		{name: "hca gone", make: dgx, n: 3, change: func(f []wire.Facts) { f[0].HCAs = f[0].HCAs[1:] },
			want: "node0: ib: mlx5_0:1 is missing (ACTIVE on 2 of 3 hosts)"},
		{name: "port down everywhere", make: hgx, n: 3, change: func(f []wire.Facts) {
			for i := range f {
				f[i].HCAs[7].State = "DOWN"
			}
		}},
		{name: "no hcas", make: hgx, n: 2, change: func(f []wire.Facts) { f[0].HCAs, f[1].HCAs = nil, nil }},
		{name: "agent checks", make: hgx, n: 2, change: func(f []wire.Facts) {
			f[1].Health.Checks[1] = wire.Check{Name: wire.CheckGPUBusy, Status: wire.CheckFail, Detail: "GPU 2 held by pid 48213 python3"}
			f[1].Health.Checks = append(f[1].Health.Checks, wire.Check{Name: wire.CheckSite, Status: wire.CheckFail, Detail: `"nhc" exited with status 1`, Output: "disk\n"})
		}, want: "node1: gpu-busy: GPU 2 held by pid 48213 python3\nnode1: site: \"nhc\" exited with status 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			names, facts := cluster(tc.make, tc.n, tc.change)
			hosts := Judge(names, facts, tc.o)
			if got := verdicts(hosts); got != tc.want {
				t.Errorf("failures:\n%s\nwant:\n%s", got, tc.want)
			}
			for i, h := range hosts {
				if len(h.Checks) != len(facts[i].Health.Checks)+2 || h.Name != names[i] {
					t.Errorf("host %d: %+v", i, h)
				}
			}
		})
	}
}

func TestJudgeWithoutHealth(t *testing.T) {
	hosts := Judge([]string{"a"}, []wire.Facts{{Name: "a"}}, Options{GPUsPerHost: 8})
	if len(hosts) != 1 || !hosts[0].Healthy() || hosts[0].Checks[0].Status != wire.CheckNotChecked {
		t.Errorf("Judge = %+v", hosts)
	}
}

func TestErr(t *testing.T) {
	names, facts := cluster(hgx, 3, func(f []wire.Facts) {
		f[2].Health.Checks = append(f[2].Health.Checks, wire.Check{Name: wire.CheckSite, Status: wire.CheckFail,
			Detail: `"/etc/nhc" exited with status 1`, Output: "ERROR: /scratch is full\nsecond line\n"})
		f[2].Health.GPUs = 7
	})
	hosts := Judge(names, facts, Options{})
	if err := Err(hosts[:2]); err != nil {
		t.Errorf("healthy hosts: %v", err)
	}
	err := Err(hosts)
	want := `1 of 3 hosts failed health checks, so no rank was started (--no-health-check skips them):
  node2: site: "/etc/nhc" exited with status 1
      ERROR: /scratch is full
      second line
  node2: gpu-count: 7 GPUs, want 8 (as on 2 of 3 hosts)`
	if err == nil || err.Error() != want {
		t.Errorf("Err =\n%v\nwant\n%s", err, want)
	}
	if got := Unhealthy(hosts); len(got) != 1 || got[0] != 2 {
		t.Errorf("Unhealthy = %v", got)
	}
}

// TestLabel: a verdict names the host as the layout does (what a spare
// replaces) and labels it with its agent's name for people.
func TestLabel(t *testing.T) {
	f := hgx("h1")
	f.Health.Checks[1].Status = wire.CheckFail
	hosts := Judge([]string{"198.18.0.2", "h1"}, []wire.Facts{f, f}, Options{})
	if hosts[0].Name != "198.18.0.2" || hosts[0].Label() != "198.18.0.2 (h1)" || hosts[1].Label() != "h1" {
		t.Errorf("Judge = %+v", hosts)
	}
	if err := Err(hosts); err == nil || !strings.Contains(err.Error(), "\n  198.18.0.2 (h1): gpu-busy: ") {
		t.Errorf("Err = %v", err)
	}
}

// TestJudgeSharesVerdicts: hosts whose facts share their health and
// ports (as the launcher's facts decoder gives them) and get the same
// launcher checks share one list of checks; a host judged otherwise (its
// own list of ports, one down) has its own.
func TestJudgeSharesVerdicts(t *testing.T) {
	names, facts := cluster(hgx, 5, func(f []wire.Facts) { f[4].HCAs[5].State = "DOWN" })
	for i := range facts {
		facts[i].Health = facts[0].Health
		if i < 4 {
			facts[i].HCAs = facts[0].HCAs // one list, as decoded once
		}
	}
	hosts := Judge(names, facts, Options{})
	if got, want := verdicts(hosts), "node4: ib: mlx5_5:1 is DOWN (ACTIVE on 4 of 5 hosts)"; got != want {
		t.Fatalf("failures:\n%s\nwant:\n%s", got, want)
	}
	for i := 1; i < 4; i++ {
		if &hosts[i].Checks[0] != &hosts[0].Checks[0] {
			t.Errorf("host %d: its checks are not host 0's, with the same verdict", i)
		}
	}
	if &hosts[4].Checks[0] == &hosts[0].Checks[0] {
		t.Error("the host with a port down shares the others' checks")
	}
}
