package launcher

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from dryRun's output")

// dryRunArgs is the dry-run example at a size that keeps the
// golden file readable.
var dryRunArgs = []string{"--dry-run", "-np", "4", "-H", "a:2,b:2", "python3", "train.py"}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (rerun with -update after checking):\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

func TestDryRunGolden(t *testing.T) {
	cfg, err := cli.Parse(dryRunArgs, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := dryRun(t.Context(), &out, cfg); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "dryrun.golden", out.Bytes())
}

// failDialer fails the test if anything tries to reach a host.
func failDialer(t *testing.T) transport.Dialer {
	return transport.DialerFunc(func(ctx context.Context, h hostfile.Host) (io.ReadWriteCloser, string, error) {
		t.Errorf("dry run dialed %s", h.Name)
		return nil, "", errors.New("dry run must not dial")
	})
}

// TestMainDryRunNeverDials runs the whole launcher with --dry-run and
// dialers that fail the test when used; the output is the golden one.
func TestMainDryRunNeverDials(t *testing.T) {
	var stdout, stderr bytes.Buffer
	d := Deps{
		Local:  failDialer(t),
		Remote: failDialer(t),
		NewLocal: func(*zap.Logger) transport.Dialer {
			t.Error("dry run built the local agent")
			return failDialer(t)
		},
		Stdin:   strings.NewReader(""),
		Stdout:  &stdout,
		Stderr:  &stderr,
		Environ: []string{}, // nothing forwarded: the golden file is this machine's
	}
	newLogger := func(string, bool) *zap.Logger { return zaptest.NewLogger(t) }
	code := Main(t.Context(), dryRunArgs, d, newLogger)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr: %q", stderr.String())
	}
	checkGolden(t, "dryrun.golden", stdout.Bytes())
}

// placement returns the placement table's rows of a dry run, without the
// header.
func placement(t *testing.T, out string) []string {
	t.Helper()
	lines := strings.Split(out, "\n")
	var rows []string
	for _, l := range lines[2:] {
		if strings.HasPrefix(l, "#") {
			break
		}
		rows = append(rows, strings.Join(strings.Fields(l), " "))
	}
	return rows
}

func TestDryRun(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantRows []string // RANK HOST LOCAL_RANK LOCAL_SIZE NODE GPU
		wantEnv  []string // entries that rank 0's environment must have
	}{
		{
			name:     "local ranks take any -np",
			args:     []string{"--dry-run", "-np", "3", "./a.out"},
			wantRows: []string{"0 localhost 0 3 0 -", "1 localhost 1 3 0 -", "2 localhost 2 3 0 -"},
			wantEnv:  []string{"MASTER_ADDR=localhost", "GROUP_WORLD_SIZE=1", "HOROVOD_HOSTNAME=localhost"},
		},
		{
			name:     "map-by node leaves unused hosts out",
			args:     []string{"--dry-run", "-np", "2", "-map-by", "node", "-H", "a:2,b:2,c:2", "-x", "NCCL_DEBUG=INFO", "-mca", "btl", "tcp", "./a.out"},
			wantRows: []string{"0 a 0 1 0 -", "1 b 0 1 1 -"},
			wantEnv:  []string{"MASTER_ADDR=a", "GROUP_WORLD_SIZE=2", "NCCL_DEBUG=INFO", "OMPI_MCA_btl=tcp"},
		},
		{
			name:     "-N",
			args:     []string{"--dry-run", "-N", "1", "-H", "a:2,b:2", "./a.out"},
			wantRows: []string{"0 a 0 1 0 -", "1 b 0 1 1 -"},
			wantEnv:  []string{"WORLD_SIZE=2", "HOROVOD_CROSS_SIZE=2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := cli.Parse(tt.args, func(string) string { return "" }, nil)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := dryRun(t.Context(), &out, cfg); err != nil {
				t.Fatal(err)
			}
			if got := placement(t, out.String()); strings.Join(got, "\n") != strings.Join(tt.wantRows, "\n") {
				t.Errorf("placement:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.wantRows, "\n"))
			}
			_, env0, _ := strings.Cut(out.String(), "# environment rank 0 ")
			env0, _, _ = strings.Cut(env0, "# environment rank 1 ")
			for _, kv := range tt.wantEnv {
				if !strings.Contains(env0, "\n"+kv+"\n") {
					t.Errorf("rank 0 environment lacks %s:\n%s", kv, env0)
				}
			}
		})
	}
}

func TestDryRunNotEnoughSlots(t *testing.T) {
	cfg, err := cli.Parse([]string{"--dry-run", "-np", "5", "-H", "a:2,b:2", "./a.out"}, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = dryRun(t.Context(), &out, cfg)
	if !errors.Is(err, plan.ErrNotEnoughSlots) {
		t.Errorf("dryRun = %v, want plan.ErrNotEnoughSlots", err)
	}
	if out.Len() != 0 {
		t.Errorf("dryRun printed %q before failing", out.String())
	}
	// Ranks per socket: the dry run's count of one socket a host is what
	// falls short, and it says so.
	cfg, err = cli.Parse([]string{"--dry-run", "-np", "16", "--map-by", "ppr:4:socket", "-H", "a:8,b:8", "./a.out"}, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := dryRun(t.Context(), &out, cfg); !errors.Is(err, plan.ErrNotEnoughSlots) || !strings.Contains(err.Error(), "a dry run cannot know the hosts' sockets") {
		t.Errorf("dryRun with ppr:4:socket = %v, want too few slots, saying it counted one socket a host", err)
	}
}

// TestDryRunMPIOperator: in an mpi-operator launcher pod with no -H, the
// plan comes from the operator's hostfile, and the dry run says so.
func TestDryRunMPIOperator(t *testing.T) {
	env := operatorEnv(t, "pi-worker-0.pi.default.svc slots=2\npi-worker-1.pi.default.svc slots=2\n")
	hf := env["OMPI_MCA_orte_default_hostfile"]
	cfg, err := cli.Parse([]string{"--dry-run", "prog"}, func(k string) string { return env[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := dryRun(t.Context(), &out, cfg); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	want := []string{
		"# placement: 4 ranks on 2 hosts (map-by slot), command: prog",
		"# hosts: mpi-operator, OMPI_MCA_orte_default_hostfile=" + hf,
		"RANK  HOST                        LOCAL_RANK  LOCAL_SIZE  NODE  GPU",
		"0     pi-worker-0.pi.default.svc  0           2           0     -",
		"1     pi-worker-0.pi.default.svc  1           2           0     -",
		"2     pi-worker-1.pi.default.svc  0           2           1     -",
		"3     pi-worker-1.pi.default.svc  1           2           1     -",
	}
	if len(lines) < len(want) || strings.Join(lines[:len(want)], "\n") != strings.Join(want, "\n") {
		t.Errorf("dry run starts\n%s\nwant\n%s", strings.Join(lines[:min(len(lines), len(want))], "\n"), strings.Join(want, "\n"))
	}
}

// TestDryRunPortFrom: in an mpi-operator launcher pod the dry run says
// where the agents' port came from when the pod's ssh configuration gave
// it (cli sets Transport.PortFrom).
func TestDryRunPortFrom(t *testing.T) {
	env := operatorEnv(t, "pi-worker-0.pi.default.svc slots=2\n")
	cfg, err := cli.Parse([]string{"-p", "22", "--dry-run", "prog"}, func(k string) string { return env[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Transport.Port, cfg.Transport.PortFrom = 2222, "/etc/ssh/ssh_config"
	var out bytes.Buffer
	if err := dryRun(t.Context(), &out, cfg); err != nil {
		t.Fatal(err)
	}
	if want := ", port 2222 from /etc/ssh/ssh_config\n"; !strings.Contains(out.String(), want) {
		t.Errorf("the dry run does not say %q:\n%s", want, out.String())
	}
}

// TestDryRunSources: each rank's variables are grouped by where they came
// from, in rankenv.SourceOrder, a variable once under the source that
// won; --network-interface's values are shown, and what only the hosts
// know is named.
func TestDryRunSources(t *testing.T) {
	environ := []string{"PATH=/u/bin", "MYVAR=x", "HOSTNAME=ws", "NCCL_DEBUG=WARN"}
	cfg, err := cli.Parse([]string{"-np", "2", "-H", "a,b", "-x", "NCCL_DEBUG=INFO", "-genv", "G", "1", "-mca", "pml", "ob1",
		"--network-interface", "eth1", "prog"}, func(string) string { return "" }, environ)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := dryRun(t.Context(), &out, cfg); err != nil {
		t.Fatal(err)
	}
	sec := out.String()[strings.Index(out.String(), "# environment rank 1 on b\n"):]
	var got []string
	for _, l := range strings.Split(sec, "\n") {
		if strings.HasPrefix(l, "# ") || strings.HasPrefix(l, "PATH=") || strings.HasPrefix(l, "MYVAR=") || strings.HasPrefix(l, "NCCL_") ||
			strings.HasPrefix(l, "G=") || strings.HasPrefix(l, "OMPI_MCA_") || strings.HasPrefix(l, "GLOO_") || strings.HasPrefix(l, "HOSTNAME") {
			got = append(got, l)
		}
	}
	want := []string{
		"# environment rank 1 on b", "# source: launcher",
		"# source: nccl", "GLOO_SOCKET_IFNAME=eth1", "NCCL_SOCKET_IFNAME==eth1",
		"# source: -mca", "OMPI_MCA_pml=ob1",
		"# source: -genv", "G=1",
		"# source: -x", "NCCL_DEBUG=INFO",
		"# source: forwarded", "MYVAR=x", "PATH=/u/bin",
		"# nccl: NCCL_IB_HCA chosen per host at launch from its routes and active HCA ports (NCCL_IB_HCA only where some are active); -inspect shows them",
		"# agent adds: HOME, LOGNAME, SHELL, USER (the login's, on hosts reached over SSH), TORCHELASTIC_ERROR_FILE (unless set above), PMI_FD",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
