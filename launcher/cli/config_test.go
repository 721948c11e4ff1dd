package cli

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// fakeEnv returns a getenv and an environ for Parse that read only m.
func fakeEnv(m map[string]string) (func(string) string, []string) {
	environ := make([]string, 0, len(m))
	for k, v := range m {
		environ = append(environ, k+"="+v)
	}
	sort.Strings(environ)
	return func(k string) string { return m[k] }, environ
}

// with is m with more's entries added (more wins).
func with(m, more map[string]string) map[string]string {
	out := maps.Clone(m)
	maps.Copy(out, more)
	return out
}

// srunTask is the environment of task procid of an srun step of n tasks
// (1, 2 or 16) in allocation 42 of two DGX nodes made with
// --ntasks-per-node=8 (`srun launcher ...` in a batch script), as Slurm
// 22.05 sets it: the step's own layout in SLURM_TASKS_PER_NODE, the
// job's request in SLURM_NTASKS_PER_NODE.
func srunTask(n, procid string) map[string]string {
	perNode := map[string]string{"1": "1", "2": "1(x2)", "16": "8(x2)"}[n]
	return map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "dgx[01-02]", "SLURM_NODELIST": "dgx[01-02]",
		"SLURM_JOB_CPUS_PER_NODE": "128(x2)", "SLURM_NTASKS_PER_NODE": "8", "SLURM_TASKS_PER_NODE": perNode, "SLURM_STEP_TASKS_PER_NODE": perNode,
		"SLURM_STEP_ID": "0", "SLURM_STEPID": "0", "SLURM_STEP_NUM_TASKS": n, "SLURM_PROCID": procid, "SLURM_NTASKS": n}
}

// defaultConfig is the Config that "launcher ARGV..." must give with no
// options and no allocation in the environment, written out by hand from
// the issue and the flag reference in Usage.
func defaultConfig(argv ...string) Config {
	return Config{
		Place:     Placement{Source: HostsLocal, MapBy: "slot", BindTo: "none", GPUsPer: 1},
		Env:       Environment{PMI: true, MPIAuto: true},
		Out:       Output{Stdin: 0, LogFormat: "console", ProgressAuto: true, ProgressEvery: 5 * time.Second},
		Transport: transport.Options{Kind: transport.Agent, Port: 22122, AgentPath: "agent", SSHCommand: "ssh", StartTimeout: 60 * time.Second, UnreachableGrace: 10 * time.Second, TreeWidth: transport.TreeAuto},
		Network:   Network{Preflight: true},
		Control:   Control{KillGrace: 5 * time.Second, RestartBackoff: time.Second},
		Health:    Health{Timeout: 30 * time.Second, MinTmpFree: 1 << 30},
		Bench:     Bench{MetricScope: "rank", WarmupSteps: -1, Straggler: 0.05},
		Argv:      argv,
	}
}

// normalize makes empty slices and maps nil so that DeepEqual compares
// contents.
func normalize(c Config) Config {
	if len(c.Env.Vars) == 0 {
		c.Env.Vars = nil
	}
	if len(c.Env.Sources) == 0 {
		c.Env.Sources = nil
	}
	// The launcher's environment as Parse got it: the environment tests
	// (env_test.go) check it.
	c.Env.Launcher = nil
	if len(c.Env.MCA) == 0 {
		c.Env.MCA = nil
	}
	if len(c.Place.Hosts) == 0 {
		c.Place.Hosts = nil
	}
	if len(c.Bench.Metrics) == 0 {
		c.Bench.Metrics = nil
	}
	if len(c.Argv) == 0 {
		c.Argv = nil
	}
	return c
}

// setVars adds name, value pairs to c's user variables, from src.
func setVars(c *Config, src string, kv ...string) {
	if c.Env.Vars == nil {
		c.Env.Vars, c.Env.Sources = map[string]string{}, map[string]string{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		c.Env.Vars[kv[i]], c.Env.Sources[kv[i]] = kv[i+1], src
	}
}

// writeFile writes text to name in a fresh temporary directory.
func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParse(t *testing.T) {
	defer func(old func() (string, error)) { findAgent = old }(findAgent)
	findAgent = func() (string, error) { return "/opt/gangway/bin/agent", nil }
	hf := writeFile(t, "hosts.txt", "# cluster\na slots=2\nroot@b slots=1 max_slots=4 port=2200\n")
	ef := writeFile(t, "job.env", "# comment\nexport NCCL_DEBUG=INFO\nGREETING=\"hello world\"\n\nQUOTED='x'\n")
	pbs := writeFile(t, "nodefile", "n1\nn1\nn2\n")
	hfHosts := []hostfile.Host{{Name: "a", Slots: 2}, {Name: "b", User: "root", Slots: 1, MaxSlots: 4, Port: 2200}}
	prog := []string{"python3", "train.py"}
	env := map[string]string{
		"NCCL_DEBUG":     "WARN",
		"NCCL_IB_HCA":    "mlx5",
		"NCCLX":          "no",
		"HOME":           "/root",
		"WANDB_API_KEY":  "k=v",
		"OMP_NUM_THREAD": "4",
	}
	slurm := map[string]string{"SLURM_JOB_NODELIST": "dgx[01-02]", "SLURM_TASKS_PER_NODE": "8(x2)"}
	// alloc is the same inside the allocation (salloc, sbatch): the
	// agents are started with srun unless hosts or a transport are given.
	alloc := map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "dgx[01-02]", "SLURM_TASKS_PER_NODE": "8(x2)"}
	dgx := []hostfile.Host{{Name: "dgx01", Slots: 8}, {Name: "dgx02", Slots: 8}}
	// mpi-operator's /etc/mpi/hostfile, as its newConfigMap writes it.
	opHF := writeFile(t, "hostfile", "pi-worker-0.pi.default.svc slots=2\npi-worker-1.pi.default.svc slots=2\n")
	opHydra := writeFile(t, "hostfile-hydra", "pi-worker-0.pi.default.svc:2\npi-worker-1.pi.default.svc:2\n")
	opHosts := []hostfile.Host{{Name: "pi-worker-0.pi.default.svc", Slots: 2}, {Name: "pi-worker-1.pi.default.svc", Slots: 2}}

	tests := []struct {
		name string
		args []string
		env  map[string]string
		want func(c *Config)
	}{
		{"no options", nil, nil, func(c *Config) {}},
		{"-np", []string{"-np", "4"}, nil, func(c *Config) { c.Place.NP = 4 }},
		{"--np", []string{"--np", "4"}, nil, func(c *Config) { c.Place.NP = 4 }},
		{"-np=", []string{"-np=4"}, nil, func(c *Config) { c.Place.NP = 4 }},
		{"--np=", []string{"--np=4"}, nil, func(c *Config) { c.Place.NP = 4 }},
		{"-n", []string{"-n", "3"}, nil, func(c *Config) { c.Place.NP = 3 }},
		{"--n", []string{"--n", "3"}, nil, func(c *Config) { c.Place.NP = 3 }},
		{"last -np wins", []string{"-np", "2", "-n", "5"}, nil, func(c *Config) { c.Place.NP = 5 }},
		{"-H", []string{"-H", "a:2,b:2"}, nil, func(c *Config) {
			c.Place.Hosts = []hostfile.Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}}
			c.Place.Source = HostsList
		}},
		{"-host", []string{"-host", "a"}, nil, func(c *Config) {
			c.Place.Hosts = []hostfile.Host{{Name: "a", Slots: 1}}
			c.Place.Source = HostsList
		}},
		{"--host", []string{"--host", "a:3"}, nil, func(c *Config) {
			c.Place.Hosts = []hostfile.Host{{Name: "a", Slots: 3}}
			c.Place.Source = HostsList
		}},
		{"-H repeated hosts add slots", []string{"-H", "a,b,a", "-H", "a:3"}, nil, func(c *Config) {
			c.Place.Hosts = []hostfile.Host{{Name: "a", Slots: 5}, {Name: "b", Slots: 1}}
			c.Place.Source = HostsList
		}},
		{"-H per-host ports and users", []string{"-H", "ubuntu@a:2:2222,b::2223,[fd00::1]:4"}, nil, func(c *Config) {
			c.Place.Hosts = []hostfile.Host{
				{Name: "a", User: "ubuntu", Slots: 2, Port: 2222},
				{Name: "b", Slots: 1, Port: 2223},
				{Name: "fd00::1", Slots: 4},
			}
			c.Place.Source = HostsList
		}},
		{"-hostfile", []string{"-hostfile", hf}, nil, func(c *Config) { c.Place.Hosts, c.Place.Source, c.Place.Hostfile = hfHosts, HostsFile, hf }},
		{"--hostfile", []string{"--hostfile", hf}, nil, func(c *Config) { c.Place.Hosts, c.Place.Source, c.Place.Hostfile = hfHosts, HostsFile, hf }},
		{"-machinefile", []string{"-machinefile", hf}, nil, func(c *Config) { c.Place.Hosts, c.Place.Source, c.Place.Hostfile = hfHosts, HostsFile, hf }},
		{"--machinefile=", []string{"--machinefile=" + hf}, nil, func(c *Config) { c.Place.Hosts, c.Place.Source, c.Place.Hostfile = hfHosts, HostsFile, hf }},
		{"-f", []string{"-f", hf}, nil, func(c *Config) { c.Place.Hosts, c.Place.Source, c.Place.Hostfile = hfHosts, HostsFile, hf }},
		{"slurm allocation", nil, slurm, func(c *Config) {
			c.Place.Hosts = []hostfile.Host{{Name: "dgx01", Slots: 8}, {Name: "dgx02", Slots: 8}}
			c.Place.Source = HostsSlurm
		}},
		{"-H wins over slurm", []string{"-H", "a:2"}, slurm, func(c *Config) {
			c.Place.Hosts = []hostfile.Host{{Name: "a", Slots: 2}}
			c.Place.Source = HostsList
		}},
		{"hostfile wins over slurm", []string{"-f", hf}, slurm, func(c *Config) { c.Place.Hosts, c.Place.Source, c.Place.Hostfile = hfHosts, HostsFile, hf }},
		{"inside an allocation: srun, the agent beside the launcher", nil, alloc, func(c *Config) {
			c.Place.Hosts, c.Place.Source, c.Transport.Kind = dgx, HostsSlurm, transport.Slurm
			c.Transport.AgentPath = "/opt/gangway/bin/agent"
		}},
		{"inside an allocation: relays of srun's agents", []string{"--tree-width", "8"}, alloc, func(c *Config) {
			c.Place.Hosts, c.Place.Source, c.Transport.Kind = dgx, HostsSlurm, transport.Slurm
			c.Transport.AgentPath = "/opt/gangway/bin/agent"
			c.Transport.TreeWidth, c.Transport.TreeWidthGiven = 8, true
		}},
		{"inside an allocation: --agent-path wins", []string{"--agent-path", "agent"}, alloc, func(c *Config) {
			c.Place.Hosts, c.Place.Source, c.Transport.Kind = dgx, HostsSlurm, transport.Slurm
		}},
		{"inside an allocation: --prefix wins", []string{"--prefix", "/usr/local"}, alloc, func(c *Config) {
			c.Place.Hosts, c.Place.Source, c.Transport.Kind = dgx, HostsSlurm, transport.Slurm
			c.Transport.AgentPath = "/usr/local/bin/agent"
		}},
		{"inside an allocation: --inspect uses srun too", []string{"--inspect"}, alloc, func(c *Config) {
			c.Place.Hosts, c.Place.Source, c.Transport.Kind, c.Mode = dgx, HostsSlurm, transport.Slurm, ModeInspect
			c.Transport.AgentPath = "/opt/gangway/bin/agent"
		}},
		{"inside a batch script (no step of its own)", nil, with(alloc, map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "16"}), func(c *Config) {
			c.Place.Hosts, c.Place.Source, c.Transport.Kind = dgx, HostsSlurm, transport.Slurm
			c.Transport.AgentPath = "/opt/gangway/bin/agent"
		}},
		{"inside a step of one task (srun --pty bash)", nil, srunTask("1", "0"), func(c *Config) {
			c.Place.Hosts, c.Place.Source, c.Transport.Kind = dgx, HostsSlurm, transport.Slurm
			c.Transport.AgentPath = "/opt/gangway/bin/agent"
		}},
		{"a dry run in one of a step's tasks", []string{"--dry-run"}, srunTask("16", "3"), func(c *Config) {
			c.Place.Hosts, c.Place.Source, c.Transport.Kind, c.Mode = dgx, HostsSlurm, transport.Slurm, ModeDryRun
			c.Transport.AgentPath = "/opt/gangway/bin/agent"
		}},
		{"inside an allocation: --transport agent", []string{"--transport", "agent"}, alloc, func(c *Config) {
			c.Place.Hosts, c.Place.Source = dgx, HostsSlurm
		}},
		{"inside an allocation: -H means agents on --port", []string{"-H", "a:2"}, alloc, func(c *Config) {
			c.Place.Hosts, c.Place.Source = []hostfile.Host{{Name: "a", Slots: 2}}, HostsList
		}},
		{"inside an allocation: --mpi openmpi keeps SSH", []string{"--mpi", "openmpi"}, alloc, func(c *Config) {
			c.Place.Hosts, c.Place.Source, c.Mode, c.Env.MPIAuto = dgx, HostsSlurm, ModeOpenMPI, false
		}},
		{"--transport slurm -H: srun on those nodes", []string{"--transport", "slurm", "-H", "dgx02:4"}, alloc, func(c *Config) {
			c.Place.Hosts, c.Place.Source, c.Transport.Kind = []hostfile.Host{{Name: "dgx02", Slots: 4}}, HostsList, transport.Slurm
			c.Transport.AgentPath = "/opt/gangway/bin/agent"
		}},
		{"PBS node file", nil, map[string]string{"PBS_NODEFILE": pbs}, func(c *Config) {
			c.Place.Hosts = []hostfile.Host{{Name: "n1", Slots: 2}, {Name: "n2", Slots: 1}}
			c.Place.Source = HostsPBS
		}},
		{"mpi-operator launcher pod", nil, map[string]string{"K_MPI_JOB_ROLE": "launcher", "OMPI_MCA_orte_default_hostfile": opHF, "OMPI_MCA_orte_set_default_slots": "2"}, func(c *Config) {
			c.Place.Hosts, c.Place.Source, c.Place.Hostfile, c.Place.HostfileVar = opHosts, HostsMPIOperator, opHF, "OMPI_MCA_orte_default_hostfile"
			c.Transport.UnreachableGrace = 0 // pods come up late
			c.Transport.MPIOperator = true
		}},
		{"mpi-operator: intel mpi", nil, map[string]string{"K_MPI_JOB_ROLE": "launcher", "I_MPI_HYDRA_HOST_FILE": opHydra, "I_MPI_PERHOST": "2"}, func(c *Config) {
			c.Place.Hosts, c.Place.Source, c.Place.Hostfile, c.Place.HostfileVar = opHosts, HostsMPIOperator, opHydra, "I_MPI_HYDRA_HOST_FILE"
			c.Transport.UnreachableGrace = 0 // pods come up late
			c.Transport.MPIOperator = true
		}},
		{"HYDRA_HOST_FILE outside a launcher pod: host keys still checked", nil, map[string]string{"HYDRA_HOST_FILE": opHydra}, func(c *Config) {
			c.Place.Hosts, c.Place.Source, c.Place.Hostfile, c.Place.HostfileVar = opHosts, HostsMPIOperator, opHydra, "HYDRA_HOST_FILE"
			c.Transport.UnreachableGrace = 0 // pods come up late
		}},
		{"-H wins over mpi-operator", []string{"-H", "a:2"}, map[string]string{"K_MPI_JOB_ROLE": "launcher", "OMPI_MCA_orte_default_hostfile": opHF}, func(c *Config) {
			c.Place.Hosts, c.Place.Source = []hostfile.Host{{Name: "a", Slots: 2}}, HostsList
		}},
		{"mpi-operator wins over a slurm allocation", nil, map[string]string{"K_MPI_JOB_ROLE": "launcher", "PRTE_MCA_prte_default_hostfile": opHF, "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "dgx[01-02]"}, func(c *Config) {
			c.Place.Hosts, c.Place.Source, c.Place.Hostfile, c.Place.HostfileVar = opHosts, HostsMPIOperator, opHF, "PRTE_MCA_prte_default_hostfile"
			c.Transport.UnreachableGrace = 0 // pods come up late
			c.Transport.MPIOperator = true
		}},
		{"slurm wins over PBS", nil, map[string]string{"PBS_NODEFILE": pbs, "SLURM_JOB_NODELIST": "dgx[01-02]", "SLURM_TASKS_PER_NODE": "8(x2)"}, func(c *Config) {
			c.Place.Hosts = []hostfile.Host{{Name: "dgx01", Slots: 8}, {Name: "dgx02", Slots: 8}}
			c.Place.Source = HostsSlurm
		}},
		{"throughput flags", []string{"--metric", "tok=(?P<value>[0-9.]+) tok/s", "--metric-scope", "global", "--warmup-steps", "3",
			"--straggler-threshold", "0.1", "--baseline-ips", "120.5", "--report", "r.json", "--plot", "p.png", "--no-summary"}, nil, func(c *Config) {
			c.Bench.Metrics = []string{"tok=(?P<value>[0-9.]+) tok/s"}
			c.Bench.MetricScope, c.Bench.WarmupSteps, c.Bench.Straggler, c.Bench.BaselineIPS = "global", 3, 0.1, 120.5
			c.Bench.ReportFile, c.Bench.PlotFile, c.Bench.NoSummary = "r.json", "p.png", true
		}},
		{"-x NAME", []string{"-x", "NCCL_DEBUG"}, env, func(c *Config) { setVars(c, SrcX, "NCCL_DEBUG", "WARN") }},
		{"-x NAME=VALUE", []string{"-x", "NCCL_DEBUG=INFO"}, env, func(c *Config) { setVars(c, SrcX, "NCCL_DEBUG", "INFO") }},
		{"-x value with =", []string{"-x", "WANDB_API_KEY"}, env, func(c *Config) { setVars(c, SrcX, "WANDB_API_KEY", "k=v") }},
		{"-x empty value", []string{"--x=EMPTY="}, nil, func(c *Config) { setVars(c, SrcX, "EMPTY", "") }},
		{"-x PREFIX*", []string{"-x", "NCCL_*"}, env, func(c *Config) { setVars(c, SrcX, "NCCL_DEBUG", "WARN", "NCCL_IB_HCA", "mlx5") }},
		{"-x later wins", []string{"-x", "A=1", "-x", "B=2", "-x", "A=3"}, nil, func(c *Config) {
			setVars(c, SrcX, "A", "3", "B", "2")
		}},
		{"--env-file then -x", []string{"--env-file", ef, "-x", "NCCL_DEBUG=TRACE"}, nil, func(c *Config) {
			setVars(c, SrcEnvFile, "GREETING", "hello world", "QUOTED", "x")
			setVars(c, SrcX, "NCCL_DEBUG", "TRACE")
		}},
		{"-genv NAME VALUE", []string{"-genv", "NCCL_DEBUG", "INFO", "-genv", "E", ""}, nil, func(c *Config) {
			setVars(c, SrcGenv, "NCCL_DEBUG", "INFO", "E", "")
		}},
		{"-env NAME VALUE (one executable: as -genv)", []string{"-env", "A", "1"}, nil, func(c *Config) { setVars(c, SrcGenv, "A", "1") }},
		{"-x and -genv: the later wins", []string{"-genv", "A", "1", "-x", "A=2", "-x", "B=1", "--genv", "B", "2"}, nil, func(c *Config) {
			setVars(c, SrcX, "A", "2")
			setVars(c, SrcGenv, "B", "2")
		}},
		{"--env-file loses to -genv", []string{"--env-file", ef, "-genv", "QUOTED", "y"}, nil, func(c *Config) {
			setVars(c, SrcEnvFile, "NCCL_DEBUG", "INFO", "GREETING", "hello world")
			setVars(c, SrcGenv, "QUOTED", "y")
		}},
		{"-genvall", []string{"-genvall"}, nil, func(c *Config) { c.Env.Forward = ForwardAll }},
		{"-genvnone", []string{"-genvnone"}, nil, func(c *Config) { c.Env.Forward = ForwardNone }},
		{"-envnone", []string{"--envnone"}, nil, func(c *Config) { c.Env.Forward = ForwardNone }},
		{"-genvlist adds up", []string{"-genvlist", "PATH,LD_LIBRARY_PATH", "-envlist", "A"}, nil, func(c *Config) {
			c.Env.Forward, c.Env.ForwardList = ForwardList, []string{"PATH", "LD_LIBRARY_PATH", "A"}
		}},
		{"--selftest", []string{"--selftest"}, nil, func(c *Config) { c.Network.Selftest = SelftestReport }},
		{"--selftest=strict", []string{"--selftest=strict"}, nil, func(c *Config) { c.Network.Selftest = SelftestStrict }},
		{"-selftest=report", []string{"-selftest=report"}, nil, func(c *Config) { c.Network.Selftest = SelftestReport }},
		{"--selftest=false", []string{"--selftest", "--selftest=false"}, nil, func(c *Config) {}},
		{"-mca KEY VALUE", []string{"-mca", "btl", "tcp,self"}, nil, func(c *Config) { c.Env.MCA = []string{"OMPI_MCA_btl=tcp,self"} }},
		{"--mca twice", []string{"--mca", "pml", "ob1", "--mca", "btl", "^openib"}, nil, func(c *Config) {
			c.Env.MCA = []string{"OMPI_MCA_pml=ob1", "OMPI_MCA_btl=^openib"}
		}},
		{"-gmca", []string{"-gmca", "btl_tcp_if_include", "eth0"}, nil, func(c *Config) {
			c.Env.MCA = []string{"OMPI_MCA_btl_tcp_if_include=eth0"}
		}},
		{"--mca=KEY=VALUE", []string{"--mca=btl=tcp"}, nil, func(c *Config) { c.Env.MCA = []string{"OMPI_MCA_btl=tcp"} }},
		{"-N", []string{"-N", "2"}, nil, func(c *Config) { c.Place.NPerNode = 2 }},
		{"--npernode", []string{"--npernode", "2"}, nil, func(c *Config) { c.Place.NPerNode = 2 }},
		{"-map-by node", []string{"-map-by", "node"}, nil, func(c *Config) { c.Place.MapBy = "node" }},
		{"--map-by slot", []string{"--map-by", "slot"}, nil, func(c *Config) { c.Place.MapBy = "slot" }},
		{"-bind-to none", []string{"-bind-to", "none"}, nil, func(c *Config) {}},
		{"--oversubscribe", []string{"--oversubscribe"}, nil, func(c *Config) { c.Place.Oversubscribe = true }},
		{"-oversubscribe", []string{"-oversubscribe"}, nil, func(c *Config) { c.Place.Oversubscribe = true }},
		{"--allow-run-as-root", []string{"--allow-run-as-root"}, nil, func(c *Config) {}},
		{"-wdir", []string{"-wdir", "/data"}, nil, func(c *Config) { c.Env.Dir = "/data" }},
		{"--wd", []string{"--wd", "/data"}, nil, func(c *Config) { c.Env.Dir = "/data" }},
		{"--gpus-per-rank", []string{"--gpus-per-rank", "2"}, nil, func(c *Config) { c.Place.GPUsPer = 2 }},
		{"output flags", []string{"--tag-output", "-timestamp-output", "--output-filename", "out", "-output-from", "0,2-3"}, nil, func(c *Config) {
			c.Out.Tags, c.Out.Timestamp, c.Out.Dir = plan.TagMpirun, true, "out"
			c.Out.From = mustRankSet("0,2-3")
		}},
		{"-l", []string{"-l"}, nil, func(c *Config) { c.Out.Tags = plan.TagRank }},
		{"-prepend-rank", []string{"-prepend-rank"}, nil, func(c *Config) { c.Out.Tags = plan.TagRank }},
		{"--tags none", []string{"--tags", "none"}, nil, func(c *Config) { c.Out.Tags = plan.TagNone }},
		{"--tags=rank", []string{"--tags=rank"}, nil, func(c *Config) { c.Out.Tags = plan.TagRank }},
		{"--tags mpirun", []string{"--tags", "mpirun"}, nil, func(c *Config) { c.Out.Tags = plan.TagMpirun }},
		{"--tags auto", []string{"-l", "--tags", "auto"}, nil, func(c *Config) { c.Out.Tags = plan.TagAuto }},
		{"last tag flag wins", []string{"--tag-output", "-l"}, nil, func(c *Config) { c.Out.Tags = plan.TagRank }},
		{"last tag flag wins, other order", []string{"-l", "--tag-output"}, nil, func(c *Config) { c.Out.Tags = plan.TagMpirun }},
		{"-l=false: no tags", []string{"-l=false"}, nil, func(c *Config) { c.Out.Tags = plan.TagNone }},
		{"--stdin none", []string{"--stdin", "none"}, nil, func(c *Config) { c.Out.Stdin = -1 }},
		{"--stdin 3", []string{"--stdin", "3"}, nil, func(c *Config) { c.Out.Stdin = 3 }},
		{"--timeout seconds", []string{"--timeout", "90"}, nil, func(c *Config) { c.Control.Timeout = 90 * time.Second }},
		{"--timeout fraction", []string{"--timeout", "1.5"}, nil, func(c *Config) { c.Control.Timeout = 1500 * time.Millisecond }},
		{"--timeout duration", []string{"--timeout", "1m30s"}, nil, func(c *Config) { c.Control.Timeout = 90 * time.Second }},
		{"MPIEXEC_TIMEOUT", nil, map[string]string{"MPIEXEC_TIMEOUT": "10"}, func(c *Config) { c.Control.Timeout = 10 * time.Second }},
		{"MPIEXEC_TIMEOUT duration", nil, map[string]string{"MPIEXEC_TIMEOUT": " 1m30s "}, func(c *Config) { c.Control.Timeout = 90 * time.Second }},
		{"MPIEXEC_TIMEOUT 0: none", nil, map[string]string{"MPIEXEC_TIMEOUT": "0"}, func(c *Config) {}},
		{"--timeout wins over MPIEXEC_TIMEOUT", []string{"--timeout", "5"}, map[string]string{"MPIEXEC_TIMEOUT": "10"}, func(c *Config) { c.Control.Timeout = 5 * time.Second }},
		{"--timeout 0 wins over MPIEXEC_TIMEOUT", []string{"--timeout=0"}, map[string]string{"MPIEXEC_TIMEOUT": "10"}, func(c *Config) {}},
		{"--start-timeout: no unreachable grace", []string{"--start-timeout", "5"}, nil, func(c *Config) {
			c.Transport.StartTimeout, c.Transport.UnreachableGrace = 5*time.Second, 0
		}},
		{"--unreachable-grace", []string{"--unreachable-grace", "2.5"}, nil, func(c *Config) { c.Transport.UnreachableGrace = 2500 * time.Millisecond }},
		{"--unreachable-grace 0", []string{"--unreachable-grace", "0"}, nil, func(c *Config) { c.Transport.UnreachableGrace = 0 }},
		{"--unreachable-grace with --start-timeout", []string{"--start-timeout", "5m", "--unreachable-grace", "3s"}, nil, func(c *Config) {
			c.Transport.StartTimeout, c.Transport.UnreachableGrace = 5*time.Minute, 3*time.Second
		}},
		{"--no-health-check", []string{"--no-health-check"}, nil, func(c *Config) { c.Health.Off = true }},
		{"health flags", []string{"--gpus-per-host", "8", "--health-check", "/etc/nhc -t 5", "--health-check-timeout", "20", "--health-min-tmp", "512M"}, nil, func(c *Config) {
			c.Health = Health{GPUsPerHost: 8, Command: "/etc/nhc -t 5", Timeout: 20 * time.Second, MinTmpFree: 512 << 20}
		}},
		{"--health-min-tmp 0", []string{"--health-min-tmp", "0"}, nil, func(c *Config) { c.Health.MinTmpFree = 0 }},
		{"--kill-grace", []string{"--kill-grace", "2s"}, nil, func(c *Config) { c.Control.KillGrace = 2 * time.Second }},
		{"--kill-grace 0", []string{"--kill-grace=0s"}, nil, func(c *Config) { c.Control.KillGrace = 0 }},
		{"restarts", []string{"--max-restarts", "3", "--restart-backoff", "0.5", "--run-id", "exp-7.b_c"}, nil, func(c *Config) {
			c.Control.MaxRestarts, c.Control.RestartBackoff, c.Control.RunID = 3, 500*time.Millisecond, "exp-7.b_c"
		}},
		{"--dry-run", []string{"--dry-run"}, nil, func(c *Config) { c.Mode = ModeDryRun }},
		{"-dry-run=true", []string{"-dry-run=true"}, nil, func(c *Config) { c.Mode = ModeDryRun }},
		{"--transport ssh", []string{"--transport", "ssh", "--ssh", "ssh -F /dev/null", "--agent-path", "/opt/agent"}, nil, func(c *Config) {
			c.Transport.Kind, c.Transport.SSHCommand, c.Transport.AgentPath = transport.SSH, "ssh -F /dev/null", "/opt/agent"
		}},
		{"-p", []string{"-p", "2222"}, nil, func(c *Config) { c.Transport.Port, c.Transport.PortGiven = 2222, true }},
		{"--port", []string{"--port", "2222"}, nil, func(c *Config) { c.Transport.Port, c.Transport.PortGiven = 2222, true }},
		{"ssh options", []string{"-i", "/k", "--known-hosts", "/kh", "--accept-new-host-keys"}, nil, func(c *Config) {
			c.Transport.Identity, c.Transport.KnownHosts, c.Transport.AcceptNewHosts = "/k", "/kh", true
		}},
		{"-v and json logs", []string{"-v", "--log-format", "json"}, nil, func(c *Config) { c.Out.Verbose, c.Out.LogFormat = true, "json" }},
		{"--mpi none", []string{"--mpi", "none"}, nil, func(c *Config) { c.Env.PMI, c.Env.MPIAuto = false, false }},
		{"-usize", []string{"-usize", "64"}, nil, func(c *Config) { c.Env.Universe = 64 }},
		{"--universe-size SYSTEM", []string{"--universe-size", "SYSTEM"}, nil, func(c *Config) { c.Env.Universe = UniverseSystem }},
		{"-usize infinite", []string{"-usize", "infinite"}, nil, func(c *Config) { c.Env.Universe = UniverseInfinite }},
		{"mpirun line", []string{"-np", "8", "-H", "a:4,b:4", "-bind-to", "none", "-map-by", "slot", "-x", "NCCL_DEBUG=INFO",
			"-mca", "pml", "ob1", "-mca", "btl", "^openib", "--allow-run-as-root"}, nil, func(c *Config) {
			c.Place.NP = 8
			c.Place.Hosts = []hostfile.Host{{Name: "a", Slots: 4}, {Name: "b", Slots: 4}}
			c.Place.Source = HostsList
			c.Env.Vars = map[string]string{"NCCL_DEBUG": "INFO"}
			c.Env.Sources = map[string]string{"NCCL_DEBUG": SrcX}
			c.Env.MCA = []string{"OMPI_MCA_pml=ob1", "OMPI_MCA_btl=^openib"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv, environ := fakeEnv(tt.env)
			args := append(append([]string{}, tt.args...), prog...)
			got, err := Parse(args, getenv, environ)
			if err != nil {
				t.Fatalf("Parse(%q): %v", args, err)
			}
			want := defaultConfig(prog...)
			tt.want(&want)
			if got, want := normalize(got), normalize(want); !reflect.DeepEqual(got, want) {
				t.Errorf("Parse(%q):\n got %+v\nwant %+v", args, got, want)
			}
		})
	}
}

// TestParseStopsAtProgram checks that the program's own flags, even ones
// that spell launcher options, reach it untouched.
func TestParseStopsAtProgram(t *testing.T) {
	tests := []struct {
		args     []string
		wantNP   int
		wantArgv []string
	}{
		{[]string{"-np", "2", "python3", "train.py", "-np", "3", "--lr", "0.1"}, 2, []string{"python3", "train.py", "-np", "3", "--lr", "0.1"}},
		{[]string{"python3", "-np", "3"}, 0, []string{"python3", "-np", "3"}},
		{[]string{"-np", "2", "--", "-np", "3"}, 2, []string{"-np", "3"}},
		{[]string{"--", "python3", "--", "x"}, 0, []string{"python3", "--", "x"}},
		{[]string{"--dry-run", "sh", "-c", "echo $RANK"}, 0, []string{"sh", "-c", "echo $RANK"}},
		{[]string{"-x", "A=1", "env", "-x", "UNSET_VAR"}, 0, []string{"env", "-x", "UNSET_VAR"}},
		{[]string{"-mca", "btl", "tcp", "./a.out", "-mca", "x"}, 0, []string{"./a.out", "-mca", "x"}},
		{[]string{"-np", "1", "-", "x"}, 1, []string{"-", "x"}},
	}
	for _, tt := range tests {
		c, err := Parse(tt.args, func(string) string { return "" }, nil)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.args, err)
			continue
		}
		if c.Place.NP != tt.wantNP || !reflect.DeepEqual(c.Argv, tt.wantArgv) {
			t.Errorf("Parse(%q): NP %d Argv %q, want %d %q", tt.args, c.Place.NP, c.Argv, tt.wantNP, tt.wantArgv)
		}
	}
}

// TestParseAnalyze checks that --analyze takes log files, not a program,
// and needs no hosts.
func TestParseAnalyze(t *testing.T) {
	c, err := Parse([]string{"--analyze", "run1.log", "run2.log"}, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := defaultConfig("run1.log", "run2.log")
	want.Mode, want.Place.Source, want.Env.PMI, want.Env.MPIAuto = ModeAnalyze, HostsLocal, false, false
	if got := normalize(c); !reflect.DeepEqual(got, normalize(want)) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestParseHelpVersion(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-help"}, {"-np", "2", "-h"}} {
		c, err := Parse(args, func(string) string { return "" }, nil)
		if err != nil || c.Mode != ModeHelp {
			t.Errorf("Parse(%q) = mode %v, %v; want help and no error", args, c.Mode, err)
		}
	}
	c, err := Parse([]string{"--version"}, func(string) string { return "" }, nil)
	if err != nil || c.Mode != ModeVersion {
		t.Errorf("Parse(--version) = mode %v, %v; want version and no error", c.Mode, err)
	}
}

func TestParseErrors(t *testing.T) {
	unreadable := filepath.Join(t.TempDir(), "missing")
	badEnvFile := writeFile(t, "bad.env", "GOOD=1\nthis line is bad\n")
	slurm := map[string]string{"SLURM_JOB_NODELIST": "dgx[01-02]"}
	alloc := map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "dgx[01-02]"}
	tests := []struct {
		name      string
		args      []string
		env       map[string]string
		wantUsage bool
		wantMsg   string // a substring of the message
	}{
		{"empty argv", nil, nil, true, "no program given"},
		{"tree width with the ssh transport", []string{"--tree-width", "4", "--transport", "ssh", "-H", "a,b", "p"}, nil, true, "--tree-width 4: relays log in to their children's agents, and --transport ssh starts every agent itself through the system ssh"},
		{"tree width negative", []string{"--tree-width", "-1", "p"}, nil, true, "want auto, 0 (flat) or a width from 1 to 4096"},
		{"tree width too wide", []string{"--tree-width", "5000", "p"}, nil, true, "want auto, 0 (flat) or a width from 1 to 4096"},
		{"tree width from the environment", []string{"p"}, map[string]string{"GANGWAY_TREE_WIDTH": "wide"}, true, `GANGWAY_TREE_WIDTH="wide"`},
		{"negative gpus per host", []string{"--gpus-per-host", "-1", "p"}, nil, true, "--gpus-per-host -1: must not be negative"},
		{"bad size", []string{"--health-min-tmp", "lots", "p"}, nil, true, `want a size such as 1G or 512M, got "lots"`},
		{"negative size", []string{"--health-min-tmp", "-1G", "p"}, nil, true, "want a size"},
		{"health check past the start timeout", []string{"--health-check", "x", "--health-check-timeout", "90", "p"}, nil, true, "--health-check-timeout 1m30s must be shorter than --start-timeout 1m0s"},
		{"health check without time", []string{"--health-check", "x", "--health-check-timeout", "0", "p"}, nil, true, "--health-check-timeout must be positive"},
		{"no program", []string{"-np", "4"}, nil, true, "no program given"},
		{"no program after --", []string{"-np", "4", "--"}, nil, true, "no program given"},
		{"unknown option", []string{"--bogus", "prog"}, nil, true, "unknown option --bogus (see launcher -h)"},
		{"unknown single-dash option", []string{"-bogus=1", "prog"}, nil, true, "unknown option -bogus=1"},
		{"pflag-style short cluster", []string{"-npx", "4", "prog"}, nil, true, "unknown option -npx"},
		{"-np without value", []string{"-np"}, nil, true, "-np needs a value"},
		{"--selftest=loud", []string{"--selftest=loud", "prog"}, nil, true, `want report, strict or false, got "loud"`},
		{"-np not a number", []string{"-np", "four", "prog"}, nil, true, "invalid value"},
		{"-np negative", []string{"-np", "-1", "prog"}, nil, true, "-np -1: must be positive"},
		{"-N negative", []string{"-N", "-2", "prog"}, nil, true, "-N -2: must be positive"},
		{"-map-by foo", []string{"-map-by", "foo", "prog"}, nil, true, `-map-by: "foo" is not supported (use slot, node, core, hwthread, socket, ppr:N:node or ppr:N:socket, optionally with :PE=n)`},
		{"-map-by ppr numa", []string{"--map-by", "ppr:2:numa", "prog"}, nil, true, `"ppr:2:numa" is not supported: NUMA nodes are not a placement unit here`},
		{"-bind-to board", []string{"-bind-to", "board", "prog"}, nil, true, `-bind-to "board" is not supported (use none, numa, core, hwthread or socket; core:N binds N cores per rank)`},
		{"-mca missing value", []string{"-mca", "btl"}, nil, true, "-mca needs KEY and VALUE"},
		{"--mca=KEY without value", []string{"--mca=btl", "prog"}, nil, true, "want -mca KEY VALUE"},
		{"unknown option near another", []string{"-nq", "2", "prog"}, nil, true, "unknown option -nq: did you mean -np?"},
		{"unknown option hostfile typo", []string{"--hostfil", "h", "prog"}, nil, true, "unknown option --hostfil: did you mean -hostfile?"},
		{"unknown option oversubscribe typo", []string{"--oversubscibe", "prog"}, nil, true, "did you mean -oversubscribe?"},
		{"--ssh unterminated quote", []string{"--ssh", "ssh -o 'x", "prog"}, nil, true, `invalid value "ssh -o 'x" for flag -ssh: unterminated single quote`},
		{"--ssh empty", []string{"--ssh", "  ", "prog"}, nil, true, "empty command"},
		{"-x bad name", []string{"-x", "1BAD=v", "prog"}, nil, true, `-x "1BAD=v": bad variable name`},
		{"-x bad pattern", []string{"-x", "A*B", "prog"}, nil, true, `-x "A*B": bad variable name`},
		{"bad -H slots", []string{"-H", "a:x", "prog"}, nil, true, `-H entry 1 "a:x": bad slots "x"`},
		{"bad -H empty entry", []string{"-H", "a,,b", "prog"}, nil, true, `-H entry 2 "": empty entry`},
		{"bad -H port", []string{"-H", "a:1:99999", "prog"}, nil, true, `-H entry 1 "a:1:99999": bad port`},
		{"-H slots merged past the limit", []string{"-H", "a:1048576", "-H", "a:1", "prog"}, nil, true, `host "a": slots 1048577 must be 1 to 1048576`},
		{"--metric-scope", []string{"--metric-scope", "host", "prog"}, nil, true, `--metric-scope "host": use rank or global`},
		{"--straggler-threshold", []string{"--straggler-threshold", "1", "prog"}, nil, true, "--straggler-threshold 1: want a fraction in [0,1)"},
		{"--analyze checks its flags", []string{"--analyze", "--metric-scope", "x", "run.log"}, nil, true, `--metric-scope "x"`},
		{"empty -H", []string{"-H", "", "prog"}, nil, true, "no hosts"},
		{"--stdin word", []string{"--stdin", "all", "prog"}, nil, true, `--stdin "all": want a rank or none`},
		{"--tags word", []string{"--tags", "hydra", "prog"}, nil, true, `want auto, none, rank or mpirun, got "hydra"`},
		{"-usize 0", []string{"-usize", "0", "prog"}, nil, true, `want a size from 1 to 1048576, SYSTEM or INFINITE, got "0"`},
		{"-usize word", []string{"-usize", "all", "prog"}, nil, true, `SYSTEM or INFINITE, got "all"`},
		{"MPIEXEC_TIMEOUT word", []string{"prog"}, map[string]string{"MPIEXEC_TIMEOUT": "ten"}, true, `MPIEXEC_TIMEOUT="ten": want seconds or a duration`},
		{"MPIEXEC_TIMEOUT negative", []string{"prog"}, map[string]string{"MPIEXEC_TIMEOUT": "-5"}, true, `MPIEXEC_TIMEOUT="-5"`},
		{"--stdin negative", []string{"--stdin", "-2", "prog"}, nil, true, `--stdin "-2"`},
		{"--timeout word", []string{"--timeout", "soon", "prog"}, nil, true, `want seconds or a duration like 90s, got "soon"`},
		{"--timeout negative seconds", []string{"--timeout", "-5", "prog"}, nil, true, `got "-5"`},
		{"--timeout negative duration", []string{"--timeout", "-5s", "prog"}, nil, true, `got "-5s"`},
		{"--timeout NaN", []string{"--timeout", "NaN", "prog"}, nil, true, `got "NaN"`},
		{"--timeout Inf", []string{"--timeout", "Inf", "prog"}, nil, true, `got "Inf"`},
		{"--timeout overflow", []string{"--timeout", "1e300", "prog"}, nil, true, `got "1e300"`},
		{"--start-timeout negative", []string{"--start-timeout", "-1m", "prog"}, nil, true, `got "-1m"`},
		{"--kill-grace negative", []string{"--kill-grace", "-1s", "prog"}, nil, true, "--kill-grace must not be negative"},
		{"--kill-grace seconds", []string{"--kill-grace", "5", "prog"}, nil, true, "invalid value"},
		{"--max-restarts negative", []string{"--max-restarts", "-1", "prog"}, nil, true, "--max-restarts -1: must not be negative"},
		{"--run-id with a slash", []string{"--run-id", "a/b", "prog"}, nil, true, `--run-id "a/b": use letters`},
		{"--output-from backwards", []string{"--output-from", "3-1", "prog"}, nil, true, `--output-from: bad rank range "3-1"`},
		{"--transport rsh", []string{"--transport", "rsh", "prog"}, nil, true, `--transport "rsh": use agent, ssh or slurm`},
		{"--gpus-per-rank 0", []string{"--gpus-per-rank", "0", "prog"}, nil, true, "--gpus-per-rank 0: must be at least 1"},
		{"--port 0", []string{"--port", "0", "prog"}, nil, true, "--port 0 out of range"},
		{"--log-format", []string{"--log-format", "xml", "prog"}, nil, true, `--log-format "xml"`},
		{"--mpi", []string{"--mpi", "pmix", "prog"}, nil, true, `--mpi "pmix"`},
		{"bool flag with bad value", []string{"--dry-run=maybe", "prog"}, nil, true, "invalid boolean value"},
		{"three dashes", []string{"---np", "2", "prog"}, nil, true, "bad flag syntax"},
		{"missing hostfile", []string{"-f", unreadable, "prog"}, nil, false, "cannot read hostfile: "},
		{"missing env file", []string{"--env-file", unreadable, "prog"}, nil, false, "cannot read env file: "},
		{"bad env file line", []string{"--env-file", badEnvFile, "prog"}, nil, true, badEnvFile + `:2: want KEY=VALUE, got "this line is bad"`},
		{"-genv missing value", []string{"-genv", "A"}, nil, true, "-genv needs KEY and VALUE"},
		{"-genv=NAME without value", []string{"-genv=A", "prog"}, nil, true, "want -genv NAME VALUE"},
		{"-genv bad name", []string{"-genv", "A-B", "1", "prog"}, nil, true, `-genv "A-B=1": bad variable name`},
		{"-genvall and -genvnone", []string{"-genvall", "-genvnone", "prog"}, nil, true, "-genvall and -genvnone: give one of -genvall, -genvnone, -genvlist"},
		{"-genvlist and -envnone", []string{"-genvlist", "A", "-envnone", "prog"}, nil, true, "-genvlist and -envnone: give one"},
		{"-genvlist bad name", []string{"-genvlist", "A,,B", "prog"}, nil, true, `bad variable name "" in "A,,B"`},
		{"-genvnone=false", []string{"-genvnone=false", "prog"}, nil, true, "takes no value"},
		{"slurm counts mismatch", []string{"prog"}, map[string]string{"SLURM_JOB_NODELIST": "dgx[01-02]", "SLURM_TASKS_PER_NODE": "8"}, false,
			"slurm allocation: SLURM_TASKS_PER_NODE"},
		{"--transport slurm outside an allocation", []string{"--transport", "slurm", "prog"}, slurm, true,
			"--transport slurm: not inside a Slurm allocation (SLURM_JOB_ID is not set"},
		{"--transport slurm without nodes", []string{"--transport", "slurm", "prog"}, map[string]string{"SLURM_JOB_ID": "42"}, true,
			"--transport slurm: no hosts"},
		{"--transport slurm --mpi openmpi", []string{"--transport", "slurm", "--mpi", "openmpi", "prog"}, alloc, true,
			"--transport slurm does not work with --mpi=openmpi"},
		{"slurm bad node list", []string{"prog"}, map[string]string{"SLURM_JOB_NODELIST": "dgx[02-01]"}, false, "slurm allocation: SLURM_JOB_NODELIST"},
		{"one of an srun step's tasks", []string{"python", "train.py"}, srunTask("16", "3"), true,
			"this launcher is task 3 of 16 of srun step 42.0: every task would launch the whole job; run the launcher once"},
		{"one of an srun step's tasks, given hosts", []string{"-H", "a:8,b:8", "python", "train.py"}, srunTask("2", "0"), true,
			"task 0 of 2 of srun step 42.0"},
		{"one of an srun step's tasks, inspecting", []string{"--inspect"}, srunTask("2", "1"), true, "task 1 of 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv, environ := fakeEnv(tt.env)
			_, err := Parse(tt.args, getenv, environ)
			if err == nil {
				t.Fatalf("Parse(%q) succeeded, want an error containing %q", tt.args, tt.wantMsg)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Parse(%q) = %q, want it to contain %q", tt.args, err, tt.wantMsg)
			}
			if got := errors.Is(err, ErrUsage); got != tt.wantUsage {
				t.Errorf("Parse(%q) = %q: errors.Is(err, ErrUsage) = %v, want %v", tt.args, err, got, tt.wantUsage)
			}
		})
	}
}

// TestParseHostMaxSlots checks that merging the same host from two sources
// keeps a valid host: slots never above max_slots.
func TestParseHostMaxSlots(t *testing.T) {
	f1 := writeFile(t, "h1", "a slots=2 max_slots=2\nb slots=1\n")
	f2 := writeFile(t, "h2", "a slots=2 max_slots=3\nb slots=1 max_slots=1\n")
	tests := []struct {
		name string
		args []string
		want []hostfile.Host
	}{
		{"both capped: caps add", []string{"-f", f1, "-f", f2}, []hostfile.Host{{Name: "a", Slots: 4, MaxSlots: 5}, {Name: "b", Slots: 2}}},
		{"-H uncapped: no cap", []string{"-H", "a:1", "-f", f1}, []hostfile.Host{{Name: "a", Slots: 3}, {Name: "b", Slots: 1}}},
	}
	for _, tt := range tests {
		c, err := Parse(append(tt.args, "prog"), func(string) string { return "" }, nil)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if !reflect.DeepEqual(c.Place.Hosts, tt.want) {
			t.Errorf("%s: hosts %+v, want %+v", tt.name, c.Place.Hosts, tt.want)
		}
		for _, h := range c.Place.Hosts {
			if err := h.Validate(); err != nil {
				t.Errorf("%s: merged host is invalid: %v", tt.name, err)
			}
		}
	}
}

// TestParseEnvWarnings: -x of a variable the launcher's environment lacks
// warns and goes on (as Open MPI's mpirun); -x of a variable the launcher
// sets per rank warns that it is ignored.
func TestParseEnvWarnings(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		env      map[string]string
		wantVars map[string]string
		want     []string
	}{
		{"unset", []string{"-x", "NOT_SET_ANYWHERE", "prog"}, nil, map[string]string{},
			[]string{"-x NOT_SET_ANYWHERE: not set in the launcher's environment; the ranks do not get it"}},
		{"set", []string{"-x", "A", "prog"}, map[string]string{"A": "1"}, map[string]string{"A": "1"}, nil},
		{"identity with value", []string{"-x", "RANK=99", "prog"}, nil, map[string]string{"RANK": "99"},
			[]string{"-x RANK is ignored: the launcher sets RANK for each rank"}},
		{"identity by name", []string{"-x", "OMPI_COMM_WORLD_RANK", "-x", "HOROVOD_RANK", "prog"}, map[string]string{"OMPI_COMM_WORLD_RANK": "3"}, map[string]string{},
			[]string{"-x OMPI_COMM_WORLD_RANK is ignored: the launcher sets OMPI_COMM_WORLD_RANK for each rank",
				"-x HOROVOD_RANK is ignored: the launcher sets HOROVOD_RANK for each rank"}},
		{"pattern matching identity is quiet", []string{"-x", "OMPI_*", "prog"}, map[string]string{"OMPI_COMM_WORLD_RANK": "3"},
			map[string]string{"OMPI_COMM_WORLD_RANK": "3"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv, environ := fakeEnv(tc.env)
			c, err := Parse(tc.args, getenv, environ)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.Env.Warnings, tc.want) {
				t.Errorf("warnings %q, want %q", c.Env.Warnings, tc.want)
			}
			if !reflect.DeepEqual(c.Env.Vars, tc.wantVars) {
				t.Errorf("vars %v, want %v", c.Env.Vars, tc.wantVars)
			}
		})
	}
}

func mustRankSet(s string) plan.RankSet {
	rs, err := plan.ParseRankSet(s)
	if err != nil {
		panic(err)
	}
	return rs
}

// TestMPIOperatorPortFromSSHConfig: in an mpi-operator launcher pod, the
// agents' port is the Port the pod's ssh configuration sets for every
// host (the operator's images: 2222), unless -p says otherwise, and the
// Config says where it came from; outside the launcher pod the
// configuration is not read.
func TestMPIOperatorPortFromSSHConfig(t *testing.T) {
	hf := writeFile(t, "hostfile", "pi-worker-0.pi.default.svc slots=2\n")
	conf := writeFile(t, "ssh_config", "Host *\n    StrictHostKeyChecking no\n    Port 2222\n")
	defer func(old string) { sshClientConfig = old }(sshClientConfig)
	sshClientConfig = conf
	for _, tc := range []struct {
		name string
		args []string
		role string
		port int
		from string
	}{
		{"launcher pod", nil, "launcher", 2222, conf},
		{"-p wins", []string{"-p", "22"}, "launcher", 22, ""},
		{"--port wins", []string{"--port", "22122"}, "launcher", 22122, ""},
		{"not the launcher pod", nil, "", DefaultPort, ""},
	} {
		env := map[string]string{"K_MPI_JOB_ROLE": tc.role, "OMPI_MCA_orte_default_hostfile": hf}
		cfg, err := Parse(append(tc.args, "--dry-run", "prog"), func(k string) string { return env[k] }, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if cfg.Transport.Port != tc.port || cfg.Transport.PortFrom != tc.from {
			t.Errorf("%s: port %d from %q, want %d from %q", tc.name, cfg.Transport.Port, cfg.Transport.PortFrom, tc.port, tc.from)
		}
	}
}

func TestMain(m *testing.M) {
	// Tests never read this machine's ssh configuration.
	sshClientConfig = "/nonexistent/ssh_config"
	os.Exit(m.Run())
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "4096": 4096, "1K": 1 << 10, "512M": 512 << 20, "1G": 1 << 30, "1GiB": 1 << 30, "1.5g": 3 << 29, "2T": 2 << 40, "10GB": 10 << 30} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "G", "-1", "1P", "NaN", "1e300G", "1 G B"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestDelegateToOpenMPI(t *testing.T) {
	defer func(old func() (string, error)) { findAgent = old }(findAgent)
	findAgent = func() (string, error) { return "/opt/gangway/bin/agent", nil }
	for _, tc := range []struct {
		args []string
		env  map[string]string
		err  string
	}{
		{args: []string{"-np", "2"}},
		{args: []string{"-np", "2", "-H", "a:1,b:1", "-mca", "btl", "tcp,self"}},
		{args: []string{"-np", "2", "-rank-by", "slot", "--display-map"}, err: "gets no -rank-by, --display-map from gangway"},
		{args: []string{"-np", "2", "-map-by", "slot:PE=2"}, err: "gets no -map-by PE=N"},
		{args: []string{"-np", "2", "--max-restarts", "2", "--report", "r.json"}, err: "gets no --max-restarts, --report from gangway"},
		{args: []string{"-np", "2"}, env: map[string]string{"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "1(x2)"},
			err: "--transport slurm"},
	} {
		getenv := func(k string) string { return tc.env[k] }
		cfg, err := Parse(append(tc.args, "./hello"), getenv, nil)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if !cfg.Env.MPIAuto || cfg.Mode != ModeRun {
			t.Fatalf("%q: MPIAuto %v, mode %v", tc.args, cfg.Env.MPIAuto, cfg.Mode)
		}
		err = cfg.DelegateToOpenMPI()
		if tc.err == "" {
			if err != nil || cfg.Mode != ModeOpenMPI {
				t.Errorf("%q: %v, mode %v", tc.args, err, cfg.Mode)
			}
			continue
		}
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.err) || cfg.Mode != ModeRun {
			t.Errorf("%q: err %v, mode %v; want a usage error saying %q", tc.args, err, cfg.Mode, tc.err)
		}
	}
	for _, mpi := range []string{"pmi", "none", "openmpi"} {
		cfg, err := Parse([]string{"--mpi", mpi, "./hello"}, func(string) string { return "" }, nil)
		if err != nil || cfg.Env.MPIAuto {
			t.Errorf("--mpi %s: MPIAuto %v, %v", mpi, cfg.Env.MPIAuto, err)
		}
	}
}

// TestTreeWidth: --tree-width's default is auto, GANGWAY_TREE_WIDTH
// gives another (not "given": a transport without relays stays flat
// under it), and the flag wins over the variable.
func TestTreeWidth(t *testing.T) {
	for _, c := range []struct {
		args  []string
		env   map[string]string
		width int
		given bool
	}{
		{[]string{"p"}, nil, transport.TreeAuto, false},
		{[]string{"p"}, map[string]string{"GANGWAY_TREE_WIDTH": "4"}, 4, false},
		{[]string{"p"}, map[string]string{"GANGWAY_TREE_WIDTH": "auto"}, transport.TreeAuto, false},
		{[]string{"--tree-width", "0", "p"}, map[string]string{"GANGWAY_TREE_WIDTH": "4"}, 0, true},
		{[]string{"--tree-width=1", "p"}, nil, 1, true},
		{[]string{"--transport", "ssh", "-H", "a,b", "p"}, map[string]string{"GANGWAY_TREE_WIDTH": "2"}, 2, false},
	} {
		getenv, environ := fakeEnv(c.env)
		cfg, err := Parse(c.args, getenv, environ)
		if err != nil {
			t.Errorf("Parse(%q, %v): %v", c.args, c.env, err)
			continue
		}
		if cfg.Transport.TreeWidth != c.width || cfg.Transport.TreeWidthGiven != c.given {
			t.Errorf("Parse(%q, %v): width %d given %v, want %d %v", c.args, c.env, cfg.Transport.TreeWidth, cfg.Transport.TreeWidthGiven, c.width, c.given)
		}
	}
}

// TestNetworkForced: --network-interface's names, in order; none for a
// choice per host.
func TestNetworkForced(t *testing.T) {
	for in, want := range map[string][]string{"": nil, "eth0": {"eth0"}, "ib0,enp1s0f0": {"ib0", "enp1s0f0"}} {
		if got := (Network{Interface: in}).Forced(); !slices.Equal(got, want) || (want == nil) != (got == nil) {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}
