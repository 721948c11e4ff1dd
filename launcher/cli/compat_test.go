package cli

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/launcher/plan"
)

func hosts(spec string) []hostfile.Host {
	hs, err := hostfile.ParseList(spec)
	if err != nil {
		panic(err)
	}
	return hs
}

// TestParseCompat: each spelling of another launcher, as Parse resolves it.
func TestParseCompat(t *testing.T) {
	alloc := map[string]string{"SLURM_JOB_NODELIST": "dgx[01-03]", "SLURM_TASKS_PER_NODE": "8(x3)"}
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(c Config) string // "" when right
	}{
		{"--nproc-per-node with -H", []string{"--nproc-per-node", "4", "-H", "a:8,b:2"}, nil, func(c Config) string {
			return wantHosts(c, "a:4", "b:4")
		}},
		{"--nproc_per_node locally", []string{"--nproc_per_node=3"}, nil, func(c Config) string {
			if c.Place.Source != HostsLocal || c.Place.NP != 3 {
				return "want -np 3 locally"
			}
			return ""
		}},
		{"--num_gpus with Slurm", []string{"--num_gpus", "2"}, alloc, func(c Config) string {
			return wantHosts(c, "dgx01:2", "dgx02:2", "dgx03:2")
		}},
		{"--nnodes 2 of 3", []string{"--nnodes", "2", "-H", "a:1,b:1,c:1"}, nil, func(c Config) string { return wantHosts(c, "a:1", "b:1") }},
		{"--nnodes 2:2", []string{"--nnodes", "2:2", "-H", "a:1,b:1,c:1"}, nil, func(c Config) string { return wantHosts(c, "a:1", "b:1") }},
		{"--num_nodes with Slurm", []string{"--num_nodes", "1", "--num_gpus", "4"}, alloc, func(c Config) string { return wantHosts(c, "dgx01:4") }},
		{"--standalone in an allocation", []string{"--standalone", "--nproc-per-node", "2"}, alloc, func(c Config) string {
			if c.Place.Source != HostsLocal || c.Place.Hosts != nil || c.Place.NP != 2 {
				return "want the local host, -np 2"
			}
			return ""
		}},
		{"--master-addr/--master_port", []string{"--master-addr", "10.0.0.1", "--master_port", "1234"}, nil, func(c Config) string {
			if c.Env.MasterAddr != "10.0.0.1" || c.Env.MasterPort != 1234 {
				return "master not set"
			}
			return ""
		}},
		{"ppr:2:node", []string{"--map-by", "ppr:2:node", "-H", "a:4,b:4"}, nil, func(c Config) string {
			if c.Place.MapBy != "slot" || c.Place.NPerNode != 2 || c.Place.BindSpec() != "none" {
				return "want slot, -N 2, no binding"
			}
			return ""
		}},
		{"ppr:1:socket", []string{"--map-by", "ppr:1:socket"}, nil, func(c Config) string {
			if c.Place.PerSocket != 1 || c.Place.BindSpec() != "socket:1" {
				return "want 1 per socket, bound to sockets"
			}
			return ""
		}},
		{"ppr:2:node:PE=2", []string{"--map-by", "ppr:2:node:PE=2"}, nil, func(c Config) string {
			if c.Place.NPerNode != 2 || c.Place.PE != 2 || c.Place.BindSpec() != "pe=2" {
				return "want -N 2, pe=2"
			}
			return ""
		}},
		{"slot:PE=3", []string{"--map-by", "slot:pe=3", "-bind-to", "core"}, nil, func(c Config) string {
			if c.Place.MapBy != "slot" || c.Place.BindSpec() != "pe=3" {
				return "want slot, pe=3"
			}
			return ""
		}},
		{"-bind-to hwthread", []string{"-bind-to", "hwthread"}, nil, func(c Config) string {
			if c.Place.BindSpec() != "hwthread" {
				return "want hwthread"
			}
			return ""
		}},
		{"--rank-by node", []string{"--rank-by", "node"}, nil, func(c Config) string {
			if c.Place.RankBy != "node" || c.Place.PlanOptions().RankBy != "node" {
				return "want rank-by node"
			}
			return ""
		}},
		{"mpirun output flags", []string{"--display-map", "--merge-stderr-to-stdout", "--nooversubscribe", "-q"}, nil, func(c Config) string {
			if !c.Out.DisplayMap || !c.Out.MergeStderr || !c.Out.Quiet || !c.Bench.NoSummary || c.Out.ProgressAuto || c.Place.Oversubscribe {
				return "want display-map, merge, quiet (no summary, no progress), no oversubscription"
			}
			return ""
		}},
		{"--prefix", []string{"--prefix", "/opt/gangway", "--transport", "ssh", "-H", "a"}, nil, func(c Config) string {
			if c.Transport.AgentPath != "/opt/gangway/bin/agent" {
				return "agent path " + c.Transport.AgentPath
			}
			return ""
		}},
		{"--agent-path wins over --prefix", []string{"--agent-path", "/x/agent", "--prefix", "/opt/gangway"}, nil, func(c Config) string {
			if c.Transport.AgentPath != "/x/agent" {
				return "agent path " + c.Transport.AgentPath
			}
			return ""
		}},
		{"--network-interfaces", []string{"--network-interfaces", "eth0,eth1"}, nil, func(c Config) string {
			if c.Network.Interface != "eth0,eth1" {
				return "interface " + c.Network.Interface
			}
			return ""
		}},
		{"--include hosts", []string{"--include", "b@c:0,1", "-H", "a:4,b:4,c:4"}, nil, func(c Config) string { return wantHosts(c, "b:4", "c:2") }},
		{"--exclude a host and a GPU", []string{"--exclude", "a@c:3", "-H", "a:4,b:4,c:4"}, nil, func(c Config) string { return wantHosts(c, "b:4", "c:3") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv, environ := fakeEnv(tt.env)
			c, err := Parse(append(tt.args, "prog"), getenv, environ)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.args, err)
			}
			if msg := tt.check(c); msg != "" {
				t.Errorf("Parse(%q): %s; got %+v", tt.args, msg, c.Place)
			}
		})
	}
}

func wantHosts(c Config, want ...string) string {
	var got []string
	for _, h := range c.Place.Hosts {
		got = append(got, h.Name+":"+strconv.Itoa(h.Slots))
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		return "hosts " + strings.Join(got, ",") + ", want " + strings.Join(want, ",")
	}
	return ""
}

// TestParseCompatErrors: refused spellings are usage errors that name
// gangway's equivalent.
func TestParseCompatErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--nnodes", "1:4"}, "elastic sizes are not supported; gangway runs a fixed-size gang and restarts it whole (--nnodes N with --max-restarts K)"},
		{[]string{"--nnodes", "3", "-H", "a,b"}, "--nnodes 3: only 2 hosts"},
		{[]string{"--nnodes", "2"}, "--nnodes 2: only 1 host (local); name the hosts (-H host1,host2 or --hostfile FILE, or run in a Slurm allocation) and run this once, not on every node"},
		{[]string{"--nnodes", "x"}, `--nnodes "x": want a number of hosts`},
		{[]string{"--standalone", "-H", "a,b"}, "--standalone runs on this machine only"},
		{[]string{"-np", "2", "--nproc-per-node", "3"}, "-np 2 and --nproc-per-node 3 disagree"},
		{[]string{"--nproc-per-node", "-1"}, "--nproc-per-node -1: want 1 to"},
		{[]string{"--map-by", "ppr:2:numa"}, `"ppr:2:numa" is not supported: NUMA nodes are not a placement unit here: -bind-to numa binds each rank to its GPU's NUMA node, -map-by ppr:N:socket places N ranks per socket`},
		{[]string{"--map-by", "ppr:2:socket:PE=2"}, "PE with a socket mapping is not supported"},
		{[]string{"--map-by", "slot:SPAN"}, `modifier "SPAN" is not supported (use PE=n, OVERSUBSCRIBE, NOOVERSUBSCRIBE or DISPLAY)`},
		{[]string{"--map-by", "ppr:2:node", "-N", "3"}, "-N 3 and -map-by ppr:2:node disagree"},
		{[]string{"--map-by", "slot:PE=2", "-bind-to", "numa"}, "PE=2 binds each rank to 2 CPUs; it cannot be combined with -bind-to numa"},
		{[]string{"--rank-by", "core"}, `-rank-by "core" is not supported: use slot or node`},
		{[]string{"--mpi", "openmpi", "--map-by", "slot:PE=2"}, "drop them, or drop --mpi=openmpi"},
		{[]string{"--master-port", "70000"}, "--master-port 70000 out of range"},
		{[]string{"--include", "z", "-H", "a,b"}, "--include: host z is not among the hosts"},
		{[]string{"--exclude", "z:1", "-H", "a,b"}, "--exclude: host z is not among the hosts"},
		{[]string{"--exclude", "a@b", "-H", "a,b"}, "--exclude leaves no hosts"},
		{[]string{"--include", "a", "--exclude", "b", "-H", "a,b"}, "--include and --exclude: give one"},
	} {
		_, err := Parse(append(tt.args, "prog"), func(string) string { return "" }, nil)
		if err == nil || !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want a usage error containing %q", tt.args, err, tt.want)
		}
	}
}

func TestParseMapBy(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want mapBy
		err  string
	}{
		{"slot", mapBy{By: "slot"}, ""},
		{"node", mapBy{By: "node"}, ""},
		{"NODE", mapBy{By: "node"}, ""},
		{"slot:PE=4", mapBy{By: "slot", PE: 4}, ""},
		{"node:pe=2", mapBy{By: "node", PE: 2}, ""},
		{"ppr:2:node", mapBy{By: "slot", PPR: 2, Unit: "node"}, ""},
		{"ppr:8:socket", mapBy{By: "slot", PPR: 8, Unit: "socket"}, ""},
		{"ppr:2:node:PE=2", mapBy{By: "slot", PPR: 2, Unit: "node", PE: 2}, ""},
		{"ppr:2", mapBy{}, "want ppr:N:node"},
		{"ppr:0:node", mapBy{}, `ranks per unit "0"`},
		{"ppr:x:node", mapBy{}, `ranks per unit "x"`},
		{"ppr:2:core", mapBy{}, `ppr unit "core"`},
		{"ppr:1:socket:PE=2", mapBy{}, "PE with a socket mapping"},
		{"socket:PE=2", mapBy{}, "PE with a socket mapping"},
		{"slot:PE=0", mapBy{}, `PE="0"`},
		{"slot:PE=2:PE=3", mapBy{}, `modifier "PE=3"`},
		{"slot:SPAN", mapBy{}, `modifier "SPAN"`},
		{"core", mapBy{By: "slot", Bind: "core"}, ""},
		{"socket", mapBy{By: "slot", Bind: "socket"}, ""},
		{"hwthread", mapBy{By: "slot", Bind: "hwthread"}, ""},
		{"core:PE=2", mapBy{By: "slot", PE: 2}, ""},
		{"ppr:2:package", mapBy{By: "slot", PPR: 2, Unit: "socket"}, ""},
		{"slot:DISPLAY", mapBy{By: "slot", Display: true}, ""},
		{"numa", mapBy{}, `"numa" is not supported: NUMA nodes`},
		{"ppr:1:numa", mapBy{}, `"ppr:1:numa" is not supported: NUMA nodes`},
		{"board", mapBy{}, `"board" is not supported`},
	} {
		got, err := parseMapBy(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("parseMapBy(%q) = %+v, %v; want an error with %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseMapBy(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func TestFilterHosts(t *testing.T) {
	for _, tt := range []struct {
		name             string
		include, exclude string
		want             string // host:slots,...
		err              string
	}{
		{"nothing", "", "", "a:4,b:4,c:4", ""},
		{"include hosts keep the hosts' order", "c@a", "", "a:4,c:4", ""},
		{"include GPUs give a slot each", "a:0,1,1@b:3", "", "a:2,b:1", ""},
		{"exclude a host", "", "b", "a:4,c:4", ""},
		{"exclude GPUs below the slots", "", "a:0,3,9", "a:2,b:4,c:4", ""},
		{"exclude every GPU drops the host", "", "a:0,1,2,3", "b:4,c:4", ""},
		{"include unknown", "a@d", "", "", "--include: host d is not among the hosts"},
		{"exclude unknown", "", "d", "", "--exclude: host d is not among the hosts"},
	} {
		var inc, exc map[string][]int
		var err error
		if tt.include != "" {
			inc, err = plan.ParseHostGPUs(tt.include)
		}
		if err == nil && tt.exclude != "" {
			exc, err = plan.ParseHostGPUs(tt.exclude)
		}
		if err != nil {
			t.Fatal(err)
		}
		got, err := filterHosts(hosts("a:4,b:4,c:4"), inc, exc)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: %v, want %q", tt.name, err, tt.err)
			}
			continue
		}
		if msg := wantHosts(Config{Place: Placement{Hosts: got}}, strings.Split(tt.want, ",")...); err != nil || msg != "" {
			t.Errorf("%s: %v %s", tt.name, err, msg)
		}
	}
}

// TestDeepSpeedEnv: ~/.deepspeed_env then ./.deepspeed_env, the working
// directory's values winning, and -x over both; DS_ENV_FILE renames them.
func TestDeepSpeedEnv(t *testing.T) {
	home, wd := t.TempDir(), t.TempDir()
	t.Chdir(wd)
	if err := os.WriteFile(filepath.Join(home, ".deepspeed_env"), []byte("NCCL_DEBUG=INFO\nFROM_HOME=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(".deepspeed_env", []byte("NCCL_DEBUG=WARN\nFROM_CWD=1\nOVER=ds\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"HOME": home}
	getenv, environ := fakeEnv(env)
	c, err := Parse([]string{"-x", "OVER=x", "prog"}, getenv, environ)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"NCCL_DEBUG": "WARN", "FROM_HOME": "1", "FROM_CWD": "1", "OVER": "x"}
	if !reflect.DeepEqual(c.Env.Vars, want) {
		t.Errorf("vars %v, want %v", c.Env.Vars, want)
	}
	env["DS_ENV_FILE"] = "other.env"
	getenv, environ = fakeEnv(env)
	if c, err = Parse([]string{"prog"}, getenv, environ); err != nil || len(c.Env.Vars) != 0 {
		t.Errorf("DS_ENV_FILE=other.env (absent): vars %v, %v; want none", c.Env.Vars, err)
	}
	if err := os.WriteFile(".deepspeed_env", []byte("not a line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	delete(env, "DS_ENV_FILE")
	getenv, environ = fakeEnv(env)
	if _, err := Parse([]string{"prog"}, getenv, environ); err == nil || !strings.Contains(err.Error(), ".deepspeed_env:1") {
		t.Errorf("bad .deepspeed_env line: %v, want an error naming .deepspeed_env:1", err)
	}
}

// FuzzParseMapBy: never panics; what it accepts is consistent.
func FuzzParseMapBy(f *testing.F) {
	for _, s := range []string{"slot", "node", "ppr:2:node", "ppr:4:socket", "ppr:2:node:PE=2", "slot:PE=3", "ppr:1:socket:PE=2",
		"ppr::node", "ppr:-1:node", "slot:PE=", ":", "ppr:99999999999999999999:node", "node:pe=1:pe=2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseMapBy(s)
		if err != nil {
			return
		}
		if m.By != "slot" && m.By != "node" || m.PE < 0 || m.PPR < 0 || (m.PPR > 0) != (m.Unit != "") || m.Unit == "socket" && m.PE > 0 {
			t.Fatalf("parseMapBy(%q) = %+v", s, m)
		}
	})
}

// FuzzHostFilter: DeepSpeed's include/exclude strings never panic the
// parser or the host filter, and the filter only keeps known hosts with
// no more slots than they had or the include list names.
func FuzzHostFilter(f *testing.F) {
	for _, s := range []string{"a", "a:0,1@b", "b:3@c:0", "a@@b", ":1", "a:", "a:x", "z", "a:0,0,0", "a:-1"} {
		f.Add(s, true)
		f.Add(s, false)
	}
	base := hosts("a:4,b:4,c:4")
	f.Fuzz(func(t *testing.T, s string, include bool) {
		m, err := plan.ParseHostGPUs(s)
		if err != nil {
			return
		}
		inc, exc := m, map[string][]int(nil)
		if !include {
			inc, exc = nil, m
		}
		got, err := filterHosts(append([]hostfile.Host(nil), base...), inc, exc)
		if err != nil {
			return
		}
		for _, h := range got {
			if h.Name != "a" && h.Name != "b" && h.Name != "c" || h.Slots < 1 || h.Slots > 4 && !include {
				t.Fatalf("%q (include %v): host %+v", s, include, h)
			}
		}
	})
}

func TestParseBindTo(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want bindTo
		err  string
	}{
		{"none", bindTo{To: "none"}, ""},
		{"CORE", bindTo{To: "core"}, ""},
		{"package", bindTo{To: "socket"}, ""},
		{"core:2", bindTo{To: "core", PE: 2}, ""},
		{"hwthread:4", bindTo{To: "hwthread", PE: 4}, ""},
		{"core:overload-allowed", bindTo{To: "core"}, ""},
		{"socket:if-supported:REPORT", bindTo{To: "socket", Report: true}, ""},
		{"socket:2", bindTo{}, `qualifier "2"`},
		{"core:2:3", bindTo{}, `qualifier "3"`},
		{"core:span", bindTo{}, `qualifier "span"`},
		{"l3cache", bindTo{}, `"l3cache" is not supported`},
		{"user:0,1", bindTo{}, `"user:0,1" is not supported`},
	} {
		got, err := parseBindTo(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("parseBindTo(%q) = %+v, %v; want an error with %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseBindTo(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

// FuzzParseBindTo: never panics; what it accepts is one of gangway's
// bindings, with CPUs per rank only for core and hwthread.
func FuzzParseBindTo(f *testing.F) {
	for _, s := range []string{"none", "core", "core:2", "hwthread:1", "socket:REPORT", "core:overload-allowed:if-supported",
		"numa", "package", "core:-1", "core:99999999999999999999", ":", "l3cache", "core::"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := parseBindTo(s)
		if err != nil {
			return
		}
		if !slices.Contains([]string{"none", "numa", "core", "hwthread", "socket"}, b.To) || b.PE != 0 && b.To != "core" && b.To != "hwthread" {
			t.Fatalf("parseBindTo(%q) = %+v", s, b)
		}
	})
}
