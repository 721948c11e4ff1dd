package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gangway-hpc/gangway/agent"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

// TestDryRunSpellings runs the launcher binary with --dry-run for each
// other launcher's spelling and checks the placement rows ("RANK HOST
// LOCAL_RANK LOCAL_SIZE NODE") and environment entries it prints.
func TestDryRunSpellings(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, ".deepspeed_env"), []byte("NCCL_DEBUG=INFO\nDS_ONLY=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		env     []string
		rows    []string // "rank host local_rank local_size node"
		header  string   // a substring of the placement header
		rankEnv []string // in every rank's environment
	}{
		{"torchrun --nnodes --nproc-per-node", []string{"--nnodes", "2", "--nproc-per-node", "2", "-H", "a:8,b:8,c:8"}, nil,
			[]string{"0 a 0 2 0", "1 a 1 2 0", "2 b 0 2 1", "3 b 1 2 1"}, "", nil},
		{"torchrun --standalone --nproc_per_node", []string{"--standalone", "--nproc_per_node", "3"}, nil,
			[]string{"0 localhost 0 3 0", "1 localhost 1 3 0", "2 localhost 2 3 0"}, "", nil},
		{"torchrun --master-addr --master_port", []string{"--master-addr", "10.1.2.3", "--master_port", "4321", "-H", "a:1,b:1"}, nil,
			[]string{"0 a 0 1 0", "1 b 0 1 1"}, "", []string{"MASTER_ADDR=10.1.2.3", "MASTER_PORT=4321"}},
		{"mpirun --map-by ppr:2:node", []string{"--map-by", "ppr:2:node", "-H", "a:4,b:4"}, nil,
			[]string{"0 a 0 2 0", "1 a 1 2 0", "2 b 0 2 1", "3 b 1 2 1"}, "2 per node", nil},
		{"mpirun --map-by ppr:1:socket", []string{"--map-by", "ppr:1:socket", "-H", "a:4,b:4"}, nil,
			[]string{"0 a 0 1 0", "1 b 0 1 1"}, "1 per socket (sockets unknown without the hosts' facts: 1 assumed), bind socket:1", nil},
		{"mpirun --map-by slot:PE=2", []string{"--map-by", "slot:PE=2", "-np", "2", "-H", "a:4"}, nil,
			[]string{"0 a 0 2 0", "1 a 1 2 0"}, "bind pe=2", nil},
		{"mpirun --rank-by node", []string{"--rank-by", "node", "-H", "a:2,b:2"}, nil,
			[]string{"0 a 0 2 0", "1 b 0 2 1", "2 a 1 2 0", "3 b 1 2 1"}, "rank-by node", nil},
		{"mpirun -bind-to socket --nooversubscribe", []string{"-bind-to", "socket", "--nooversubscribe", "-H", "a:1"}, nil,
			[]string{"0 a 0 1 0"}, "bind socket", nil},
		{"DeepSpeed --num_gpus --num_nodes", []string{"--num_gpus", "1", "--num_nodes", "2", "-H", "a:8,b:8,c:8"}, nil,
			[]string{"0 a 0 1 0", "1 b 0 1 1"}, "", nil},
		{"DeepSpeed --include", []string{"--include", "c:0,1@b", "-H", "a:1,b:1,c:4"}, nil,
			[]string{"0 b 0 1 0", "1 c 0 2 1", "2 c 1 2 1"}, "", nil},
		{"DeepSpeed --exclude", []string{"--exclude", "b", "-H", "a:1,b:1,c:1"}, nil,
			[]string{"0 a 0 1 0", "1 c 0 1 1"}, "", nil},
		{"Hydra -ppn -hosts -bind-to core:2", []string{"-n", "4", "-ppn", "2", "-hosts", "a,b", "-bind-to", "core:2"}, nil,
			[]string{"0 a 0 2 0", "1 a 1 2 0", "2 b 0 2 1", "3 b 1 2 1"}, "2 per node, bind pe=2", nil},
		{"torchrun --nproc-per-node gpu", []string{"--nproc-per-node", "gpu", "-H", "a,b"}, nil,
			[]string{"0 a 0 1 0", "1 b 0 1 1"}, "nproc-per-node gpu (GPUs unknown without the hosts' facts: 1 GPU and this machine's CPUs assumed)", nil},
		{"mpirun --map-by socket", []string{"--map-by", "socket", "-np", "2", "-H", "a:2"}, nil,
			[]string{"0 a 0 2 0", "1 a 1 2 0"}, "map-by slot, bind socket", nil},
		{"DeepSpeed .deepspeed_env, -x wins", []string{"-x", "NCCL_DEBUG=WARN", "-H", "a:1"}, []string{"HOME=" + home},
			[]string{"0 a 0 1 0"}, "", []string{"NCCL_DEBUG=WARN", "DS_ONLY=1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := startLauncherEnv(t, tt.env, false, append(append([]string{"--dry-run"}, tt.args...), "prog")...)
			assertCode(t, l, 0)
			out := l.stdout()
			header, _, _ := strings.Cut(out, "\n")
			if !strings.HasPrefix(header, "# placement: ") || !strings.Contains(header, tt.header) {
				t.Errorf("header %q, want it to contain %q", header, tt.header)
			}
			var rows []string
			for _, line := range lines(out) {
				f := strings.Fields(line)
				if len(f) == 6 && f[0] != "RANK" && !strings.HasPrefix(line, "#") {
					rows = append(rows, strings.Join(f[:5], " "))
				}
			}
			if !slices.Equal(rows, tt.rows) {
				t.Errorf("placement\n%s\nwant\n%s", strings.Join(rows, "\n"), strings.Join(tt.rows, "\n"))
			}
			for _, sec := range strings.Split(out, "# environment rank ")[1:] {
				for _, kv := range tt.rankEnv {
					if !slices.Contains(lines(sec), kv) {
						t.Errorf("rank %s lacks %s", strings.Fields(sec)[0], kv)
					}
				}
			}
		})
	}
}

// TestSpellingsRefused: spellings gangway cannot honour exit 2 with a
// message naming the equivalent.
func TestSpellingsRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--nnodes", "1:4"}, "--max-restarts"},
		{[]string{"--include", "z", "-H", "a,b"}, "--include: host z is not among the hosts"},
		{[]string{"--map-by", "ppr:2:numa"}, "-map-by ppr:N:socket places N ranks per socket"},
		{[]string{"--rank-by", "core"}, "use slot or node"},
		{[]string{"--node_rank", "1"}, "launcher: usage: --node_rank is torchrun's and DeepSpeed's option, not gangway's: gangway starts every host's ranks from one command"},
		{[]string{"--gloo"}, "launcher: usage: --gloo is horovodrun's option, not gangway's"},
	} {
		l := startLauncher(t, false, append(append([]string{"--dry-run"}, tt.args...), "prog")...)
		assertCode(t, l, 2)
		if !strings.Contains(l.stderr(), tt.want) {
			t.Errorf("%q: stderr %q, want %q", tt.args, l.stderr(), tt.want)
		}
	}
}

// TestDisplayMapMergeQuiet: --display-map prints the placement on stderr
// before the job runs, --merge-stderr-to-stdout sends the ranks' stderr
// to stdout, and -q leaves stderr nothing else.
func TestDisplayMapMergeQuiet(t *testing.T) {
	t.Parallel()
	l := startLauncher(t, false, "--display-map", "--merge-stderr-to-stdout", "-q", "-l", "-np", "2", "sh", "-c", "echo out $RANK; echo err $RANK >&2")
	assertCode(t, l, 0)
	stdout, stderr := l.stdout(), l.stderr()
	for r := range 2 {
		for _, s := range []string{"out", "err"} {
			if want := fmt.Sprintf("[%d] %s %d", r, s, r); !slices.Contains(lines(stdout), want) {
				t.Errorf("stdout lacks %q:\n%s", want, stdout)
			}
		}
	}
	want := []string{"# placement: 2 ranks on 1 host (map-by slot), command: sh -c echo out $RANK; echo err $RANK >&2",
		"RANK  HOST       LOCAL_RANK  LOCAL_SIZE  NODE  GPU"}
	got := lines(stderr)
	if len(got) != 4 || !slices.Equal(got[:2], want) || !strings.HasPrefix(got[2], "0     localhost  0           2           0") {
		t.Errorf("stderr:\n%s\nwant the placement table only", stderr)
	}
}

// TestBindingPE: -map-by ppr:N:node:PE=n binds each rank to n
// consecutive CPUs of those its (loopback, in-process) agent may use,
// as the ranks' /proc/self/status says. Fitted to two CPUs.
func TestBindingPE(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var cpus []int
	for c := range 1024 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) < 2 {
		t.Skipf("%d CPUs allowed; the test needs 2", len(cpus))
	}
	c := e2e.StartLocal(t, 2)
	cases := []struct {
		mapBy string
		np    int
		want  []string // rank -> its Cpus_allowed_list
	}{
		{"ppr:1:node:PE=2", 2, []string{agent.FormatCPUList(cpus[:2]), agent.FormatCPUList(cpus[:2])}},
		{"ppr:2:node:PE=1", 4, []string{agent.FormatCPUList(cpus[:1]), agent.FormatCPUList(cpus[1:2]), agent.FormatCPUList(cpus[:1]), agent.FormatCPUList(cpus[1:2])}},
		// One socket here (checked below): a rank per host, bound to
		// every allowed CPU, the socket's.
		{"ppr:1:socket", 2, []string{agent.FormatCPUList(cpus), agent.FormatCPUList(cpus)}},
	}
	// Flat, and through the agent tree (make test's tree phase does not
	// run this package: its other launches are local).
	for _, width := range []string{"0", "1"} {
		for _, tt := range cases {
			t.Run(tt.mapBy+"/tree width "+width, func(t *testing.T) {
				if strings.HasSuffix(tt.mapBy, "socket") && sockets(cpus) != 1 {
					t.Skipf("%d sockets; the case expects one", sockets(cpus))
				}
				stdout, stderr, code := c.RunLauncher(t, append(c.SSHFlags(), "-l", "--tree-width", width, "--map-by", tt.mapBy, "-H", c.HostList(max(tt.np/2, 1)), "--report-bindings",
					"sh", "-c", "grep Cpus_allowed_list /proc/self/status")...)
				if code != 0 {
					t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
				}
				t.Logf("stderr:\n%s", stderr)
				got := e2e.RankLines(stdout)
				if len(got) != tt.np {
					t.Fatalf("%d ranks printed, want %d:\n%s", len(got), tt.np, stdout)
				}
				for r, want := range tt.want {
					if l := got[r]; len(l) != 1 || strings.Join(strings.Fields(l[0]), " ") != "Cpus_allowed_list: "+want {
						t.Errorf("rank %d: %q, want Cpus_allowed_list: %s", r, l, want)
					}
				}
			})
		}
	}
}

// sockets counts the sockets of cpus from sysfs; 0 when sysfs does not say.
func sockets(cpus []int) int {
	ids := map[string]bool{}
	for _, c := range cpus {
		b, err := os.ReadFile(fmt.Sprintf("/sys/devices/system/cpu/cpu%d/topology/physical_package_id", c))
		if err != nil {
			return 0
		}
		ids[strings.TrimSpace(string(b))] = true
	}
	return len(ids)
}

// TestTorchrunLine: torchrun's spellings on a real local job: ranks per
// host from the host's facts (auto: its GPUs, else its CPUs), -m runs a
// Python module, the rendezvous options are accepted and the endpoint's
// warning printed before the job.
func TestTorchrunLine(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skipf("no python3: %v", err)
	}
	l := startLauncher(t, false, "--standalone", "--nproc-per-node=auto", "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:29400", "--rdzv-id=job42",
		"-m", "sysconfig")
	assertCode(t, l, 0)
	want := runtime.NumCPU()
	if n := strings.Count(l.stdout(), "Platform: "); n != want {
		t.Errorf("%d ranks ran python3 -m sysconfig, want %d (one per CPU: no GPUs here)\n%s", n, want, l.stdout())
	}
	if w := "launcher: warning: --rdzv-endpoint is not used: gangway is the rendezvous"; !strings.Contains(l.stderr(), w) {
		t.Errorf("stderr lacks %q:\n%s", w, l.stderr())
	}
	l = startLauncher(t, false, "--nproc_per_node", "gpu", "true")
	assertCode(t, l, 2)
	if w := "launcher: --nproc-per-node gpu: host localhost has no GPUs"; !strings.Contains(l.stderr(), w) {
		t.Errorf("stderr lacks %q:\n%s", w, l.stderr())
	}
}

// TestMasterAddrFlag: a real job's ranks get --master-addr and
// --master_port as given, not the launcher's choice.
func TestMasterAddrFlag(t *testing.T) {
	t.Parallel()
	l := startLauncher(t, false, "--master-addr", "10.9.9.9", "--master_port", "1234", "-np", "2", "sh", "-c", "echo $MASTER_ADDR:$MASTER_PORT")
	assertCode(t, l, 0)
	if got := lines(l.stdout()); !slices.Equal(got, []string{"10.9.9.9:1234", "10.9.9.9:1234"}) {
		t.Errorf("ranks printed %q, want 10.9.9.9:1234 twice", got)
	}
}
