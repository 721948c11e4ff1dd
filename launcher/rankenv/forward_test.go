package rankenv

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/plan"
)

// userEnv is a copy of a real user's interactive environment on a
// workstation: an SSH login with agent forwarding, a virtualenv inside a
// conda base, CUDA libraries, tmux, an X display.
var userEnv = []string{
	"CONDA_DEFAULT_ENV=base", "CONDA_PREFIX=/home/ana/miniconda3", "CONDA_SHLVL=1",
	"DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1000/bus", "DISPLAY=localhost:10.0",
	"HOME=/home/ana", "HOSTNAME=ws17", "LANG=en_US.UTF-8", "LC_ALL=en_US.UTF-8",
	"LD_LIBRARY_PATH=/usr/local/cuda/lib64:/home/ana/miniconda3/lib", "LOGNAME=ana",
	"NCCL_DEBUG=INFO", "NCCL_SOCKET_IFNAME=eth9", "OLDPWD=/home/ana", "OMP_NUM_THREADS=8",
	"OMPI_MCA_btl_tcp_if_include=eth0", "OMPI_COMM_WORLD_RANK=3",
	"PATH=/home/ana/.local/bin:/home/ana/proj/.venv/bin:/home/ana/miniconda3/bin:/usr/local/cuda/bin:/usr/bin:/bin",
	"PMI_PORT=ws17:4411", "PWD=/home/ana/proj", "PYTHONPATH=/home/ana/proj/src", "SHELL=/bin/zsh", "SHLVL=2",
	"SLURM_JOB_ID=77", "SLURM_NODEID=0", "SSH_AUTH_SOCK=/tmp/ssh-XXXX/agent.4242",
	"SSH_CLIENT=10.1.2.3 51234 22", "SSH_CONNECTION=10.1.2.3 51234 10.1.2.17 22", "SSH_TTY=/dev/pts/3",
	"TERM=xterm-256color", "TMPDIR=/tmp/ana-session", "TMUX=/tmp/tmux-1000/default,4321,0",
	"TORCHELASTIC_ERROR_FILE=/tmp/outer.json", "USER=ana", "VIRTUAL_ENV=/home/ana/proj/.venv",
	"WANDB_API_KEY=k=v", "XAUTHORITY=/home/ana/.Xauthority", "XDG_RUNTIME_DIR=/run/user/1000",
	"XDG_SESSION_ID=42", "XDG_CONFIG_HOME=/home/ana/.config", "_=/usr/bin/launcher",
	"BASH_FUNC_module%%=() {  eval $(/usr/bin/modulecmd bash $*)\n}", "GANGWAY_SRUN_LAUNCHER_KEY=secret",
	"=C:=weird", "noequals",
}

// travels is what of userEnv the default rule forwards.
var travels = []string{
	"BASH_FUNC_module%%=() {  eval $(/usr/bin/modulecmd bash $*)\n}",
	"CONDA_DEFAULT_ENV=base", "CONDA_PREFIX=/home/ana/miniconda3", "CONDA_SHLVL=1",
	"LANG=en_US.UTF-8", "LC_ALL=en_US.UTF-8",
	"LD_LIBRARY_PATH=/usr/local/cuda/lib64:/home/ana/miniconda3/lib",
	"NCCL_DEBUG=INFO", "NCCL_SOCKET_IFNAME=eth9", "OMPI_MCA_btl_tcp_if_include=eth0", "OMP_NUM_THREADS=8",
	"PATH=/home/ana/.local/bin:/home/ana/proj/.venv/bin:/home/ana/miniconda3/bin:/usr/local/cuda/bin:/usr/bin:/bin",
	"PYTHONPATH=/home/ana/proj/src", "TERM=xterm-256color", "VIRTUAL_ENV=/home/ana/proj/.venv",
	"WANDB_API_KEY=k=v", "XDG_CONFIG_HOME=/home/ana/.config",
}

func TestForwarded(t *testing.T) {
	for _, tt := range []struct {
		name    string
		environ []string
		mode    cli.ForwardMode
		list    []string
		want    []string
	}{
		{"default: all but the host-specific names", userEnv, cli.ForwardAll, nil, travels},
		{"-genvnone", userEnv, cli.ForwardNone, nil, nil},
		{"-genvlist, host-specific names included", userEnv, cli.ForwardList, []string{"PATH", "DISPLAY", "NOT_SET"},
			[]string{"DISPLAY=localhost:10.0", "PATH=/home/ana/.local/bin:/home/ana/proj/.venv/bin:/home/ana/miniconda3/bin:/usr/local/cuda/bin:/usr/bin:/bin"}},
		{"the last entry of a name wins, as getenv", []string{"A=1", "B=2", "A=3"}, cli.ForwardAll, nil, []string{"A=3", "B=2"}},
		{"empty values travel", []string{"EMPTY="}, cli.ForwardAll, nil, []string{"EMPTY="}},
		{"nothing", nil, cli.ForwardAll, nil, []string{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Forwarded(tt.environ, tt.mode, tt.list)
			if !slices.Equal(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestHostSpecific(t *testing.T) {
	for k, want := range map[string]bool{
		"HOSTNAME": true, "SSH_AUTH_SOCK": true, "SSH_CONNECTION": true, "DISPLAY": true, "PWD": true,
		"SLURM_PROCID": true, "SLURMD_NODENAME": true, "LSB_JOBID": true, "K_MPI_JOB_ROLE": true, "PMI_PORT": true, "PMIX_RANK": true, "OMPI_COMM_WORLD_RANK": true,
		"OMPI_MCA_pml": false, "TORCHELASTIC_USE_AGENT_STORE": true, "XDG_RUNTIME_DIR": true, "XDG_CONFIG_HOME": false,
		"HOME": true, "USER": true, "TMPDIR": true, "GANGWAY_SRUN_LAUNCHER_KEY": true,
		"PATH": false, "LD_LIBRARY_PATH": false, "LD_PRELOAD": false, "NCCL_DEBUG": false, "TERM": false,
		"CUDA_VISIBLE_DEVICES": false, "SSH": false, "HOSTNAMES": false,
	} {
		if why, got := HostSpecific(k); got != want || got && why == "" {
			t.Errorf("HostSpecific(%s) = %q, %v; want %v with a reason", k, why, got, want)
		}
	}
}

// TestDocumentedHostSpecific keeps docs/environment.md's list true: it
// names every host-specific name.
func TestDocumentedHostSpecific(t *testing.T) {
	b, err := os.ReadFile("../../docs/environment.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range HostSpecificNames() {
		if !strings.Contains(string(b), "`"+h[0]+"`") {
			t.Errorf("docs/environment.md does not list `%s`", h[0])
		}
	}
}

// TestRankVarsSources is the whole rule as a table: the launcher's
// environment and the flags in, one rank's variables with their sources
// out.
func TestRankVarsSources(t *testing.T) {
	launcherEnv := []string{"PATH=/u/bin", "NCCL_SOCKET_IFNAME=eth9", "NCCL_DEBUG=WARN", "RANK=7", "HOSTNAME=ws",
		"A=from-env", "CUDA_VISIBLE_DEVICES=3", "OMPI_MCA_pml=ob1"}
	ef := writeEnvFile(t, "B=from-file\nC=from-file\n")
	for _, tt := range []struct {
		name string
		args []string
		want map[string][2]string // KEY -> VALUE, source; "" value: absent
	}{
		{"default", nil, map[string][2]string{
			"PATH": {"/u/bin", SrcForwarded}, "NCCL_DEBUG": {"WARN", SrcForwarded}, "A": {"from-env", SrcForwarded},
			"RANK": {"0", SrcLauncher}, "HOSTNAME": {}, "NCCL_SOCKET_IFNAME": {"=eth0", SrcNCCL},
			"CUDA_VISIBLE_DEVICES": {"1", SrcLauncher}, "OMPI_MCA_pml": {"ob1", SrcForwarded},
		}},
		{"-genvnone keeps only the flags", []string{"-genvnone", "-x", "NCCL_DEBUG=INFO"}, map[string][2]string{
			"PATH": {}, "A": {}, "NCCL_DEBUG": {"INFO", cli.SrcX}, "NCCL_SOCKET_IFNAME": {"=eth0", SrcNCCL},
		}},
		{"-genvlist", []string{"-genvlist", "A,HOSTNAME"}, map[string][2]string{
			"PATH": {}, "A": {"from-env", SrcForwarded}, "HOSTNAME": {"ws", SrcForwarded},
		}},
		{"-x NAME wins over the host's network choice", []string{"-x", "NCCL_SOCKET_IFNAME"}, map[string][2]string{
			"NCCL_SOCKET_IFNAME": {"eth9", cli.SrcX},
		}},
		{"-genv and -mca over forwarded; identity stays", []string{"-genv", "A", "g", "-genv", "RANK", "9", "-mca", "pml", "ucx"}, map[string][2]string{
			"A": {"g", cli.SrcGenv}, "RANK": {"0", SrcLauncher}, "OMPI_MCA_pml": {"ucx", SrcMCA},
		}},
		{"--env-file below -x and -genv", []string{"--env-file", ef, "-x", "C=x", "-genv", "A", "g"}, map[string][2]string{
			"B": {"from-file", cli.SrcEnvFile}, "C": {"x", cli.SrcX}, "A": {"g", cli.SrcGenv},
		}},
		{"--tf-config over -x TF_CONFIG", []string{"--tf-config", "2222", "-x", "TF_CONFIG=mine"}, map[string][2]string{
			"TF_CONFIG": {`{"cluster":{"worker":["a:2222","b:2222"]},"task":{"type":"worker","index":0},"environment":"cloud"}`, SrcTFConfig},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := cli.Parse(append(tt.args, "prog"), func(string) string { return "" }, launcherEnv)
			if err != nil {
				t.Fatal(err)
			}
			ranks := []plan.Rank{{Rank: 0, Host: 0, LocalSize: 1, GPUs: []int{1}}, {Rank: 1, Host: 1, NodeRank: 1, LocalSize: 1}}
			hosts := []hostEnv{{Name: "a", Net: []string{"NCCL_SOCKET_IFNAME==eth0"}}, {Name: "b"}}
			vars := newBuilder(ranks, hosts, newJobEnv(cfg, "j", 0, "a", 0)).Vars(ranks[0])
			got := map[string][2]string{}
			for i, v := range vars {
				if i > 0 && vars[i-1].Key >= v.Key {
					t.Errorf("not sorted, one entry per name: %s after %s", v.Key, vars[i-1].Key)
				}
				got[v.Key] = [2]string{v.Value, v.Src}
			}
			for k, want := range tt.want {
				if g, ok := got[k]; want[1] == "" && ok {
					t.Errorf("%s=%q from %s, want it absent", k, g[0], g[1])
				} else if want[1] != "" && g != want {
					t.Errorf("%s: got %q, want %q", k, g, want)
				}
			}
		})
	}
}

func writeEnvFile(t *testing.T, text string) string {
	t.Helper()
	p := t.TempDir() + "/job.env"
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOwnOverShared: a rank's environment is its own variables over the
// shared ones (the forwarded environment and what every rank gets
// alike: what the agent merges), and Own leaves out what it gets from
// the shared list: the forwarded variables, -x's, the job's.
func TestOwnOverShared(t *testing.T) {
	cfg, err := cli.Parse([]string{"-x", "NCCL_DEBUG=INFO", "prog"}, func(string) string { return "" },
		[]string{"PATH=/u/bin", "NCCL_DEBUG=WARN", "RANK=7", "A=1"})
	if err != nil {
		t.Fatal(err)
	}
	ranks := []plan.Rank{{Rank: 0, LocalSize: 1}}
	j := newJobEnv(cfg, "j", 0, "a", 0)
	b := newBuilder(ranks, []hostEnv{{Name: "a"}}, j)
	merged := map[string]string{}
	for _, kv := range append(b.Shared(), b.Own(ranks[0])...) {
		k, v, _ := strings.Cut(kv, "=")
		merged[k] = v
	}
	want := b.Rank(ranks[0])
	if len(merged) != len(want) {
		t.Errorf("shared+own has %d names, Rank %d", len(merged), len(want))
	}
	for _, kv := range want {
		k, v, _ := strings.Cut(kv, "=")
		if merged[k] != v {
			t.Errorf("%s: shared+own %q, Rank %q", k, merged[k], v)
		}
	}
	for _, kv := range b.Own(ranks[0]) {
		if k, _, _ := strings.Cut(kv, "="); kv == "PATH=/u/bin" || kv == "A=1" || k == "NCCL_DEBUG" || k == "WORLD_SIZE" {
			t.Errorf("Own carries the shared %s", kv)
		}
	}
}
