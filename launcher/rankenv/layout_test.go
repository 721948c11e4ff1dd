package rankenv

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/plan"
)

func parse(t *testing.T, args ...string) cli.Config {
	t.Helper()
	cfg, err := cli.Parse(append(args, "prog"), func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func names(l Layout) []string {
	var out []string
	for _, h := range l.Hosts {
		out = append(out, h.Name)
	}
	return out
}

// TestPlanHosts: the transport (the srun step) is built for the layout's
// hosts, those dial will reach: the ones the plan uses, and every host
// with per-socket placement (planned only from the hosts' facts), where
// a plan of the slots alone would have put all ranks on the first node.
func TestPlanHosts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		want  []string
		ranks int // placed before any host is reached; 0: not yet
	}{
		{"by slot", []string{"-np", "2", "-H", "cn1:2,cn2:2"}, []string{"cn1"}, 2},
		{"per socket", []string{"-np", "2", "-H", "cn1:2,cn2:2", "-map-by", "ppr:1:socket"}, []string{"cn1", "cn2"}, 0},
		{"local", []string{"-np", "2"}, []string{"localhost"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Plan(parse(t, tc.args...).Place)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(l); !slices.Equal(got, tc.want) || len(l.Ranks) != tc.ranks {
				t.Errorf("hosts %v with %d ranks, want %v with %d", got, len(l.Ranks), tc.want, tc.ranks)
			}
		})
	}
}

// TestPlanUsageError: a plan that cannot be made fails before any host
// is reached, as a usage error.
func TestPlanUsageError(t *testing.T) {
	_, err := Plan(parse(t, "-np", "5", "-H", "a:2,b:2").Place)
	if !errors.Is(err, plan.ErrNotEnoughSlots) || !errors.Is(err, cli.ErrUsage) {
		t.Errorf("got %v, want a usage error for too few slots", err)
	}
}

// TestPlanSlurmSlots: a Slurm job allocated by its GPUs has one task,
// so one slot, a node; -np 16 then fails naming the ways to eight ranks
// a host, and -ppn 8 is one of them.
func TestPlanSlurmSlots(t *testing.T) {
	env := map[string]string{"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "dgx[01-02]", "SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_JOB_CPUS_PER_NODE": "128(x2)"}
	getenv := func(k string) string { return env[k] }
	cfg, err := cli.Parse([]string{"--agent-path", "/opt/gangway/bin/agent", "-np", "16", "python", "train.py"}, getenv, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Plan(cfg.Place)
	if !errors.Is(err, plan.ErrNotEnoughSlots) || !errors.Is(err, cli.ErrUsage) ||
		!strings.Contains(err.Error(), "ask salloc or sbatch for --ntasks-per-node=N, or give -ppn N (--nproc-per-node N)") {
		t.Errorf("got %v, want a usage error naming --ntasks-per-node and -ppn", err)
	}
	cfg, err = cli.Parse([]string{"--agent-path", "/opt/gangway/bin/agent", "-ppn", "8", "python", "train.py"}, getenv, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := Plan(cfg.Place); err != nil || len(l.Ranks) != 16 {
		t.Errorf("-ppn 8: %d ranks (%v), want 16", len(l.Ranks), err)
	}
	// Hosts given by hand are not the job's: no Slurm advice.
	if _, err := Plan(parse(t, "-np", "5", "-H", "a:2,b:2").Place); strings.Contains(err.Error(), "Slurm") {
		t.Errorf("advice about Slurm for hosts given by -H: %v", err)
	}
}

// TestComplete: the slots the facts tell are used once the hosts are
// reached, and each Complete gives the attempt a plan of its own.
func TestComplete(t *testing.T) {
	t.Run("local: a slot per GPU, else per CPU", func(t *testing.T) {
		l, _ := Plan(parse(t).Place)
		for _, tc := range []struct {
			f    wire.Facts
			want int
		}{{wire.Facts{CPUs: 3}, 3}, {wire.Facts{CPUs: 8, GPUs: []wire.GPU{{}, {}}}, 2}, {wire.Facts{}, 1}} {
			c, err := l.Complete([]wire.Facts{tc.f})
			if err != nil || len(c.Ranks) != tc.want || c.Hosts[0].Slots != tc.want {
				t.Errorf("%+v: %d ranks on %d slots (%v), want %d", tc.f, len(c.Ranks), c.Hosts[0].Slots, err, tc.want)
			}
		}
		if len(l.Hosts) != 1 || l.Hosts[0].Slots != 1 || l.Ranks != nil {
			t.Errorf("Complete changed the layout it was called on: %+v", l)
		}
	})
	t.Run("per socket", func(t *testing.T) {
		l, _ := Plan(parse(t, "-H", "a,b", "-map-by", "ppr:2:socket").Place)
		c, err := l.Complete([]wire.Facts{{Sockets: 2}, {Sockets: 1}})
		if err != nil || len(c.Ranks) != 6 || c.Hosts[0].Slots != 4 || c.Hosts[1].Slots != 2 {
			t.Errorf("%d ranks, slots %d and %d (%v), want 6 on 4 and 2", len(c.Ranks), c.Hosts[0].Slots, c.Hosts[1].Slots, err)
		}
		if _, err := l.Complete([]wire.Facts{{Sockets: 2}, {}}); err == nil || !strings.Contains(err.Error(), "host b does not report its sockets") || !errors.Is(err, cli.ErrUsage) {
			t.Errorf("a host without sockets: %v", err)
		}
		l, _ = Plan(parse(t, "-np", "2", "-H", "a,b", "-map-by", "ppr:2:socket").Place)
		if _, err := l.Complete([]wire.Facts{{Sockets: 1}, {Sockets: 1}}); err == nil || !strings.Contains(err.Error(), "-np 2 leaves hosts without ranks") {
			t.Errorf("a host without ranks: %v", err)
		}
	})
	t.Run("--nproc-per-node gpu, cpu, auto", func(t *testing.T) {
		gpus := func(n int) []wire.GPU { return make([]wire.GPU, n) }
		facts := []wire.Facts{{CPUs: 16, GPUs: gpus(2)}, {CPUs: 8}}
		for _, tc := range []struct {
			kind string
			want []int // slots per host
			err  string
		}{
			{"gpu", nil, "--nproc-per-node gpu: host b has no GPUs"},
			{"cpu", []int{16, 8}, ""},
			{"auto", []int{2, 8}, ""},
		} {
			l, err := Plan(parse(t, "-H", "a,b", "--nproc-per-node", tc.kind).Place)
			if err != nil || l.Ranks != nil {
				t.Fatalf("%s: planned before the facts: %v", tc.kind, err)
			}
			c, err := l.Complete(facts)
			if tc.err != "" {
				if err == nil || !errors.Is(err, cli.ErrUsage) || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("%s: %v, want a usage error with %q", tc.kind, err, tc.err)
				}
				continue
			}
			if err != nil || len(c.Hosts) != 2 || c.Hosts[0].Slots != tc.want[0] || c.Hosts[1].Slots != tc.want[1] || len(c.Ranks) != tc.want[0]+tc.want[1] {
				t.Errorf("%s: %+v, %d ranks, %v; want slots %v", tc.kind, c.Hosts, len(c.Ranks), err, tc.want)
			}
		}
		l, _ := Plan(parse(t, "-H", "a,b", "--nproc-per-node", "gpu").Place)
		if c, err := l.Complete([]wire.Facts{{GPUs: gpus(4)}, {GPUs: gpus(8)}}); err != nil || len(c.Ranks) != 12 || c.Ranks[4].Host != 1 {
			t.Errorf("gpu: %d ranks, %v; want 4 on a, 8 on b", len(c.Ranks), err)
		}
		l, _ = Plan(parse(t, "-np", "2", "-H", "a,b", "--nproc-per-node", "gpu").Place)
		if _, err := l.Complete([]wire.Facts{{GPUs: gpus(4)}, {GPUs: gpus(4)}}); err == nil || !strings.Contains(err.Error(), "--nproc-per-node gpu: -np 2 leaves hosts without ranks") {
			t.Errorf("a host without ranks: %v", err)
		}
		l, _ = Plan(parse(t, "--nproc-per-node", "gpu").Place)
		if c, err := l.Complete([]wire.Facts{{CPUs: 32, GPUs: gpus(8)}}); err != nil || len(c.Ranks) != 8 {
			t.Errorf("locally: %d ranks, %v; want one per GPU", len(c.Ranks), err)
		}
	})
	t.Run("given slots: a copy of the plan", func(t *testing.T) {
		l, _ := Plan(parse(t, "-H", "a:2").Place)
		c, _ := l.Complete([]wire.Facts{{}})
		c.Ranks[0].GPUs = []int{7}
		if l.Ranks[0].GPUs != nil {
			t.Error("an attempt's GPUs reached the launch's plan")
		}
	})
	t.Run("inspect: slots, no plan", func(t *testing.T) {
		c, err := Reach(parse(t).Place).Complete([]wire.Facts{{CPUs: 4}})
		if err != nil || c.Ranks != nil || c.Hosts[0].Slots != 4 {
			t.Errorf("%+v, %v", c, err)
		}
	})
}

// TestAssumed: a dry run assumes a slot per CPU locally and one socket
// per host, and leaves hosts without ranks out.
func TestAssumed(t *testing.T) {
	l, _ := Plan(parse(t, "-np", "2", "-H", "a:9,b:9,c:9", "-map-by", "ppr:1:socket").Place)
	a, err := l.Assumed(16)
	if err != nil || !slices.Equal(names(a), []string{"a", "b"}) || len(a.Ranks) != 2 {
		t.Errorf("%v with %d ranks (%v), want [a b] with 2", names(a), len(a.Ranks), err)
	}
	l, _ = Plan(parse(t, "-H", "a,b", "--nproc-per-node", "gpu").Place)
	if a, err := l.Assumed(16); err != nil || len(a.Ranks) != 2 {
		t.Errorf("gpu: %d ranks (%v), want one GPU assumed per host", len(a.Ranks), err)
	}
	l, _ = Plan(parse(t, "-H", "a,b", "--nproc-per-node", "auto").Place)
	if a, err := l.Assumed(16); err != nil || len(a.Ranks) != 2 {
		t.Errorf("auto: %d ranks (%v), want one GPU assumed per host", len(a.Ranks), err)
	}
	l, _ = Plan(parse(t, "-H", "a,b", "--nproc-per-node", "cpu").Place)
	if a, err := l.Assumed(16); err != nil || len(a.Ranks) != 32 {
		t.Errorf("cpu: %d ranks (%v), want this machine's CPUs per host", len(a.Ranks), err)
	}
	l, _ = Plan(parse(t).Place)
	if a, err := l.Assumed(16); err != nil || len(a.Ranks) != 16 {
		t.Errorf("local: %d ranks (%v), want a slot per CPU", len(a.Ranks), err)
	}
}

func spareNames(l Layout) []string {
	var out []string
	for _, h := range l.Spares {
		out = append(out, h.Name)
	}
	return out
}

// TestSpares: hosts the placement leaves without ranks and --spares' last
// N stand by; Replace puts spares in the places of the hosts left out and
// places the ranks again by the same rule, renumbered; too few spares is
// an error.
func TestSpares(t *testing.T) {
	for _, tc := range []struct {
		name         string
		args         []string
		hosts        []string
		spares       []string
		out          []string // hosts Replace leaves out; nil: no Replace
		nextHosts    []string
		nextSpares   []string
		firstRankOn  string // the next layout's rank 0's host
		lastRankHost string // the next layout's last rank's host
		err          string
	}{
		{name: "a longer list", args: []string{"-np", "16", "-H", "a:8,b:8,c:8"}, hosts: []string{"a", "b"}, spares: []string{"c"},
			out: []string{"a"}, nextHosts: []string{"b", "c"}, nextSpares: nil, firstRankOn: "b", lastRankHost: "c"},
		{name: "--spares", args: []string{"-H", "a:8,b:8,c:8,d:8,e:8", "--spares", "1"}, hosts: []string{"a", "b", "c", "d"}, spares: []string{"e"},
			out: []string{"b"}, nextHosts: []string{"a", "c", "d", "e"}, firstRankOn: "a", lastRankHost: "e"},
		{name: "both kinds, in order", args: []string{"-np", "8", "-H", "a:8,b:8,c:8", "--spares", "1"}, hosts: []string{"a"}, spares: []string{"b", "c"},
			out: []string{"a"}, nextHosts: []string{"b"}, nextSpares: []string{"c"}, firstRankOn: "b", lastRankHost: "b"},
		{name: "round robin renumbered", args: []string{"-np", "4", "-map-by", "node", "-H", "a:2,b:2,c:2,d:2", "--spares", "2"}, hosts: []string{"a", "b"}, spares: []string{"c", "d"},
			out: []string{"a"}, nextHosts: []string{"b", "c"}, nextSpares: []string{"d"}, firstRankOn: "b", lastRankHost: "c"},
		{name: "too few spares", args: []string{"-H", "a:8,b:8,c:8", "--spares", "1"}, hosts: []string{"a", "b"}, spares: []string{"c"},
			out: []string{"a", "b"}, err: "2 hosts to leave out, 1 spares"},
		{name: "nothing left out", args: []string{"-H", "a:8,b:8,c:8", "--spares", "1"}, hosts: []string{"a", "b"}, spares: []string{"c"},
			out: []string{"zz"}, nextHosts: []string{"a", "b"}, nextSpares: []string{"c"}, firstRankOn: "a", lastRankHost: "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Plan(parse(t, tc.args...).Place)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(names(l), tc.hosts) || !slices.Equal(spareNames(l), tc.spares) {
				t.Fatalf("hosts %v spares %v, want %v and %v", names(l), spareNames(l), tc.hosts, tc.spares)
			}
			next, taken, err := l.Replace(tc.out)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Replace: %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(names(next), tc.nextHosts) || !slices.Equal(spareNames(next), tc.nextSpares) {
				t.Errorf("next hosts %v spares %v, want %v and %v", names(next), spareNames(next), tc.nextHosts, tc.nextSpares)
			}
			if len(next.Ranks) != len(l.Ranks) {
				t.Errorf("next attempt has %d ranks, the first %d: the world size must stay", len(next.Ranks), len(l.Ranks))
			}
			if first, last := next.Hosts[next.Ranks[0].Host].Name, next.Hosts[next.Ranks[len(next.Ranks)-1].Host].Name; first != tc.firstRankOn || last != tc.lastRankHost {
				t.Errorf("rank 0 on %s, last rank on %s; want %s and %s", first, last, tc.firstRankOn, tc.lastRankHost)
			}
			if len(tc.out) > 0 && tc.out[0] != "zz" && len(taken) != len(tc.out) {
				t.Errorf("took %d spares for %d hosts left out", len(taken), len(tc.out))
			}
		})
	}
}

// TestSparesRefused: --spares needs a host list with slots, and leaves
// at least one host to run ranks.
func TestSparesRefused(t *testing.T) {
	for _, args := range [][]string{
		{"-np", "2", "--spares", "1"},
		{"-H", "a:8,b:8", "--spares", "2"},
		{"-H", "a:8,b:8", "--spares", "1", "-map-by", "ppr:1:socket"},
		{"-H", "a:8,b:8", "--spares", "-1"},
	} {
		if _, err := cli.Parse(append(args, "prog"), func(string) string { return "" }, nil); !errors.Is(err, cli.ErrUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}
