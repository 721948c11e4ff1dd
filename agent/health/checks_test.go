package health

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// fixture reads testdata/dir/name, else testdata/base/name (a degraded
// variant holds only what differs from its base).
func fixture(t *testing.T, dir, base, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", dir, name))
	if errors.Is(err, fs.ErrNotExist) && base != "" {
		b, err = os.ReadFile(filepath.Join("testdata", base, name))
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func smiOf(t *testing.T, dir, base string) SMI {
	return SMI{GPUs: fixture(t, dir, base, "query-gpu.csv"), Apps: fixture(t, dir, base, "apps.csv"), Remapped: fixture(t, dir, base, "remapped.csv")}
}

// summary is "name=status" for each check, and the failures' details.
func summary(cs []wire.Check) (string, string) {
	var st, fails []string
	for _, c := range cs {
		st = append(st, c.Name+"="+string(c.Status))
		if c.Status == wire.CheckFail {
			fails = append(fails, c.Name+": "+c.Detail)
		}
	}
	return strings.Join(st, " "), strings.Join(fails, "\n")
}

func TestJudgeGPUsFixtures(t *testing.T) {
	const allOK = "gpu-driver=ok gpu-busy=ok gpu-ecc=ok gpu-remap=ok gpu-retired=not_checked"
	for _, tc := range []struct {
		dir, base string
		smi       func(SMI) SMI // changes to the fixture's answers
		count     int
		status    string
		fail      string // substring of the failures' details
	}{
		{dir: "h100", count: 1, status: allOK},
		{dir: "dgx-a100", count: 8, status: allOK},
		{dir: "hgx-h100", count: 8, status: allOK},
		{dir: "dgx-a100-missing", base: "dgx-a100", count: 7, status: allOK},
		{dir: "dgx-a100-ecc", base: "dgx-a100", count: 8,
			status: "gpu-driver=ok gpu-busy=ok gpu-ecc=fail gpu-remap=ok gpu-retired=not_checked",
			fail:   "gpu-ecc: GPU 3 (GPU-1a5e9c73-6b2f-0d48-c3a9-5e7b9d1f3a04, 00000000:4E:00.0): 2 uncorrectable ECC errors since the driver loaded"},
		{dir: "hgx-h100-remap", base: "hgx-h100", count: 8,
			status: "gpu-driver=ok gpu-busy=ok gpu-ecc=ok gpu-remap=fail gpu-retired=not_checked",
			fail:   "gpu-remap: GPU 5 (GPU-6a1c0e2b-9b0e-4c6f-d4d1-0b2a4c6e8d16, 00000000:AB:00.0): a row remap is pending (reset the GPU)"},
		{dir: "hgx-h100-remap-failure", base: "hgx-h100", count: 8,
			status: "gpu-driver=ok gpu-busy=ok gpu-ecc=ok gpu-remap=fail gpu-retired=not_checked",
			fail:   "GPU 2 (GPU-0a5c4e6b-35a8-4c0f-ae7b-4b6a8c0e2d13, 00000000:3A:00.0): a row remap failed"},
		{dir: "hgx-h100-busy", base: "hgx-h100", count: 8,
			status: "gpu-driver=ok gpu-busy=fail gpu-ecc=ok gpu-remap=ok gpu-retired=not_checked",
			fail:   "gpu-busy: GPU 2 (GPU-0a5c4e6b-35a8-4c0f-ae7b-4b6a8c0e2d13, 00000000:3A:00.0) held by pid 48213 /usr/bin/python3.11 (10240 MiB)"},
		{dir: "h100", count: 1,
			smi:    func(s SMI) SMI { s.Apps = fixture(t, "h100", "", "apps-busy.csv"); return s },
			status: "gpu-driver=ok gpu-busy=fail gpu-ecc=ok gpu-remap=ok gpu-retired=not_checked",
			fail:   "gpu-busy: GPU 0 (GPU-e2d0ec95-1a81-707a-0c0f-ac30499a7b6a, 00000000:00:06.0) held by pid 465 /opt/torch/.venv/bin/python3 (1634 MiB)"},
		{dir: "hgx-h100", count: 8,
			smi: func(s SMI) SMI {
				s.Apps = []byte("GPU-5c1f0a2e-91d4-4e6b-8a37-0d2c4e6f8a11, 3011, nvidia-cuda-mps-server, 30 MiB\n")
				return s
			},
			status: allOK},
		{dir: "hgx-h100", count: 8,
			smi: func(s SMI) SMI {
				s.Apps = []byte("GPU-5c1f0a2e-91d4-4e6b-8a37-0d2c4e6f8a11, 3011, /usr/bin/nvidia-cuda-mps-server, 30 MiB\nGPU-5c1f0a2e-91d4-4e6b-8a37-0d2c4e6f8a11, 4100, python3, 900 MiB\n")
				return s
			},
			status: "gpu-driver=ok gpu-busy=fail gpu-ecc=ok gpu-remap=ok gpu-retired=not_checked",
			fail:   "gpu-busy: GPU 0 (GPU-5c1f0a2e-91d4-4e6b-8a37-0d2c4e6f8a11, 00000000:18:00.0) held by pid 4100 python3 (900 MiB)"},
		{dir: "dgx1-v100", base: "dgx-a100", count: 8,
			smi: func(s SMI) SMI {
				s.Remapped, s.RemappedErr = nil, errors.New("nvidia-smi: exit status 2: Field \"remapped_rows.correctable\" is not a valid field to query.")
				return s
			},
			status: "gpu-driver=ok gpu-busy=ok gpu-ecc=ok gpu-remap=not_checked gpu-retired=ok"},
		{dir: "dgx1-v100-retired", base: "dgx-a100", count: 8,
			smi:    func(s SMI) SMI { s.Remapped, s.RemappedErr = nil, errors.New("not supported"); return s },
			status: "gpu-driver=ok gpu-busy=ok gpu-ecc=ok gpu-remap=not_checked gpu-retired=fail",
			fail:   "gpu-retired: GPU 1 (GPU-a1b2c3d4-0002-4e6b-8a37-0d2c4e6f8a22, 00000000:07:00.0): a page is pending retirement"},
		{dir: "h100", count: -1,
			smi:    func(SMI) SMI { return SMI{Missing: true} },
			status: "gpu-driver=not_checked gpu-busy=not_checked gpu-ecc=not_checked gpu-remap=not_checked gpu-retired=not_checked"},
		{dir: "h100", count: -1,
			smi: func(SMI) SMI {
				return SMI{DriverGPUs: 8, GPUsErr: errors.New("nvidia-smi: exit status 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver")}
			},
			status: "gpu-driver=fail gpu-busy=not_checked gpu-ecc=not_checked gpu-remap=not_checked gpu-retired=not_checked",
			fail:   "gpu-driver: nvidia-smi failed with 8 GPUs in /proc/driver/nvidia: nvidia-smi: exit status 9: NVIDIA-SMI has failed"},
		{dir: "h100", count: -1,
			smi:    func(SMI) SMI { return SMI{GPUsErr: errors.New("couldn't communicate with the NVIDIA driver")} },
			status: "gpu-driver=not_checked gpu-busy=not_checked gpu-ecc=not_checked gpu-remap=not_checked gpu-retired=not_checked"},
		{dir: "h100", count: 0,
			smi:    func(SMI) SMI { return SMI{GPUs: []byte("\n")} },
			status: "gpu-driver=ok gpu-busy=ok gpu-ecc=ok gpu-remap=ok gpu-retired=ok"},
		{dir: "h100", count: -1,
			smi:    func(SMI) SMI { return SMI{GPUs: []byte("garbage\n")} },
			status: "gpu-driver=not_checked gpu-busy=not_checked gpu-ecc=not_checked gpu-remap=not_checked gpu-retired=not_checked"},
		{dir: "h100", count: 1,
			smi: func(s SMI) SMI {
				s.GPUs = []byte("0, GPU-e2d0ec95-1a81-707a-0c0f-ac30499a7b6a, 00000000:00:06.0, NVIDIA H100 80GB HBM3, 81559, Disabled, [N/A], [N/A], [N/A], [N/A]\n")
				return s
			},
			status: "gpu-driver=ok gpu-busy=ok gpu-ecc=not_checked gpu-remap=ok gpu-retired=not_checked"},
	} {
		name := tc.dir
		if tc.smi != nil {
			name += "/changed"
		}
		t.Run(name, func(t *testing.T) {
			s := smiOf(t, tc.dir, tc.base)
			if tc.smi != nil {
				s = tc.smi(s)
			}
			n, cs := JudgeGPUs(s)
			st, fails := summary(cs)
			if n != tc.count || st != tc.status {
				t.Errorf("JudgeGPUs = %d, %s\nwant %d, %s", n, st, tc.count, tc.status)
			}
			if tc.fail == "" && fails != "" || !strings.Contains(fails, tc.fail) {
				t.Errorf("failures:\n%s\nwant %q", fails, tc.fail)
			}
			h := wire.Health{GPUs: n, Checks: cs}
			if err := h.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestQueriesAreAccepted: every field the checks ask nvidia-smi for is
// one the H100's driver lists as valid.
func TestQueriesAreAccepted(t *testing.T) {
	for file, q := range map[string]string{"help-query-gpu.txt": GPUQuery[0], "help-apps.txt": AppsQuery[0], "help-remapped.txt": RemapQuery[0]} {
		help := string(fixture(t, "h100", "", file))
		_, list, _ := strings.Cut(q, "=")
		for f := range strings.SplitSeq(list, ",") {
			if !strings.Contains(help, `"`+f+`"`) {
				t.Errorf("%s: field %q is not in the driver's list", file, f)
			}
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"short gpu line", second(ParseGPUs([]byte("0, GPU-x, 00:01.0\n"))), "want 10 fields, got 3"},
		{"bad index", second(ParseGPUs([]byte("x, u, b, n, 1, Enabled, 0, 0, No, 0\n"))), `bad index "x"`},
		{"bad ecc", second(ParseGPUs([]byte("0, u, b, n, 1, Enabled, -3, 0, No, 0\n"))), `bad count "-3"`},
		{"bad pending", second(ParseGPUs([]byte("0, u, b, n, 1, Enabled, 0, 0, Maybe, 0\n"))), `want Yes or No, got "Maybe"`},
		{"short app", second(ParseApps([]byte("GPU-x, 12\n"))), "want 4 fields"},
		{"bad pid", second(ParseApps([]byte("GPU-x, twelve, python, 1 MiB\n"))), `bad pid "twelve"`},
		{"short remap", second(ParseRemapped([]byte("b, u, 0, 0, No\n"))), "want 6 fields, got 5"},
		{"bad remap", second(ParseRemapped([]byte("b, u, 0, 0, No, Perhaps\n"))), `:1: want Yes or No`},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, tc.err, tc.want)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func TestParseCommasInNames(t *testing.T) {
	g, err := ParseGPUs([]byte("2, GPU-u, 00000000:07:00.0, Odd, Name, 1, Enabled, 0, 0, [N/A], [N/A]\n"))
	if err != nil || len(g) != 1 || g[0].Name != "Odd, Name" || g[0].Index != 2 || g[0].RetiredPending != "" {
		t.Errorf("ParseGPUs = %+v, %v", g, err)
	}
	a, err := ParseApps([]byte("GPU-u, 7, python3 -c a, b, [N/A]\n"))
	if err != nil || len(a) != 1 || a[0].Name != "python3 -c a, b" || a[0].Memory != "" || a[0].PID != 7 {
		t.Errorf("ParseApps = %+v, %v", a, err)
	}
}

func TestJudgeTmp(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		name   string
		st     TmpStat
		err    error
		min    int64
		status wire.CheckStatus
		detail string
	}{
		{"room", TmpStat{Free: 40 * gib, Total: 100 * gib}, nil, gib, wire.CheckOK, "TMPDIR /scratch has 40.0 GiB free of 100.0 GiB"},
		{"full", TmpStat{Free: 12 << 20, Total: 100 * gib}, nil, gib, wire.CheckFail, "TMPDIR /scratch has 12.0 MiB free of 100.0 GiB (at least 1.0 GiB wanted: --health-min-tmp)"},
		{"empty file system", TmpStat{}, nil, gib, wire.CheckFail, "has 0 B free of 0 B"},
		{"no threshold", TmpStat{Free: 0, Total: gib}, nil, 0, wire.CheckOK, "has 0 B free"},
		{"missing", TmpStat{}, fs.ErrNotExist, gib, wire.CheckFail, "TMPDIR /scratch does not exist"},
		{"not a directory", TmpStat{}, errors.New("not a directory"), gib, wire.CheckFail, "TMPDIR /scratch: not a directory"},
	} {
		c := JudgeTmp("/scratch", tc.st, tc.err, tc.min)
		if c.Name != wire.CheckTmpDir || c.Status != tc.status || !strings.Contains(c.Detail, tc.detail) {
			t.Errorf("%s: %+v, want %s %q", tc.name, c, tc.status, tc.detail)
		}
	}
}

func TestJudgeSite(t *testing.T) {
	for _, tc := range []struct {
		r      SiteResult
		status wire.CheckStatus
		detail string
	}{
		{SiteResult{Command: "nhc", Output: "ok\n"}, wire.CheckOK, `"nhc" exited with status 0`},
		{SiteResult{Command: "nhc", Code: 3, Output: "ERROR: nhc: disk /scratch full\n"}, wire.CheckFail, `"nhc" exited with status 3`},
		{SiteResult{Command: "nhc", Code: 137}, wire.CheckFail, "status 137"},
		{SiteResult{Command: "sleep 9", TimedOut: 2 * time.Second}, wire.CheckFail, `"sleep 9" did not end within 2s (killed)`},
		{SiteResult{Command: "x", Err: fmt.Errorf("chdir /home/a: %w", fs.ErrNotExist)}, wire.CheckFail, `"x": chdir /home/a`},
	} {
		c := JudgeSite(tc.r)
		if c.Status != tc.status || !strings.Contains(c.Detail, tc.detail) || c.Output != tc.r.Output {
			t.Errorf("JudgeSite(%+v) = %+v, want %s %q", tc.r, c, tc.status, tc.detail)
		}
	}
}

func TestBoundedBuffer(t *testing.T) {
	b := &boundedBuffer{max: 40, keepTail: true}
	fmt.Fprint(b, "start of it\n")
	for i := range 100 {
		fmt.Fprintf(b, "line %d\n", i)
	}
	s := b.String()
	if len(s) > 40+markRoom {
		t.Errorf("kept %d bytes", len(s))
	}
	if !strings.HasPrefix(s, "start of it\nline 0\n") || !strings.HasSuffix(s, "line 99\n") || !strings.Contains(s, "bytes left out") {
		t.Errorf("kept %q", s)
	}
	small := &boundedBuffer{max: 40, keepTail: true}
	fmt.Fprint(small, "short\n")
	if small.String() != "short\n" {
		t.Errorf("kept %q", small.String())
	}
}

// TestRunSite runs real commands through /bin/sh: exit statuses, output,
// the timeout (the whole group is killed: a grandchild too) and the
// environment.
func TestRunSite(t *testing.T) {
	ctx := t.Context()
	r := RunSite(ctx, "echo out; echo err >&2; echo $GANGWAY_HOST; exit 3", 10*time.Second, SiteOptions{Env: []string{"GANGWAY_HOST=h7", "PATH=/usr/bin:/bin"}})
	if r.Code != 3 || r.Err != nil || r.TimedOut != 0 || r.Output != "out\nerr\nh7\n" {
		t.Errorf("RunSite = %+v", r)
	}
	if r := RunSite(ctx, "true", 10*time.Second, SiteOptions{}); r.Code != 0 || r.Err != nil || r.TimedOut != 0 {
		t.Errorf("true: %+v", r)
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	// The timeout must leave sh time to start, fork and print on a loaded
	// machine (300 ms may pass before it printed): the timeout is checked,
	// not how soon sh runs.
	r = RunSite(ctx, "sleep 60 & echo $! > "+pidFile+"; echo waiting; wait", 3*time.Second, SiteOptions{})
	if r.TimedOut != 3*time.Second || r.Output != "waiting\n" {
		t.Errorf("timeout: %+v", r)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	fmt.Sscan(string(b), &pid)
	if !gone(pid, 5*time.Second) {
		t.Errorf("the check's grandchild %d outlived its timeout", pid)
	}
	if r := RunSite(ctx, "exit 0", time.Second, SiteOptions{Dir: "/nonexistent-dir"}); r.Err == nil {
		t.Errorf("a missing directory: %+v", r)
	}
}

// gone waits until pid is dead (no /proc entry, or a zombie).
func gone(pid int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		if _, rest, ok := strings.Cut(string(b), ") "); ok && strings.HasPrefix(rest, "Z") {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// TestGather: the queries Gather sends are the ones the fixtures answer,
// the ranks' TMPDIR is the launcher's when it sets one, and the site
// command runs only when asked for.
func TestGather(t *testing.T) {
	answers := map[string]string{GPUQuery[0]: "query-gpu.csv", AppsQuery[0]: "apps-busy.csv", RemapQuery[0]: "remapped.csv"}
	smi := func(_ context.Context, args ...string) ([]byte, error) {
		f, ok := answers[args[0]]
		if !ok {
			return nil, fmt.Errorf("unexpected nvidia-smi %v", args)
		}
		b, err := os.ReadFile(filepath.Join("testdata", "h100", f))
		return b, err
	}
	var statted []string
	statfs := func(dir string) (TmpStat, error) {
		statted = append(statted, dir)
		return TmpStat{Free: 1 << 20, Total: 1 << 30}, nil
	}
	dir := t.TempDir()
	h := Gather(t.Context(), Options{NvidiaSMI: smi, Statfs: statfs, TmpDir: "/nonexistent"},
		wire.HealthRequest{TmpDir: dir, MinTmpFree: 1 << 30, Command: "echo nope; exit 1", Timeout: 10 * time.Second})
	st, fails := summary(h.Checks)
	if h.GPUs != 1 || st != "gpu-driver=ok gpu-busy=fail gpu-ecc=ok gpu-remap=ok gpu-retired=not_checked tmpdir=fail site=fail" {
		t.Errorf("Gather: %d GPUs, %s", h.GPUs, st)
	}
	if !strings.Contains(fails, "held by pid 465") || !strings.Contains(fails, "TMPDIR "+dir+" has 1.0 MiB free") || h.Checks[6].Output != "nope\n" {
		t.Errorf("failures: %s", fails)
	}
	if len(statted) != 1 || statted[0] != dir {
		t.Errorf("statfs of %v, want %s", statted, dir)
	}

	missing := func(context.Context, ...string) ([]byte, error) { return nil, exec.ErrNotFound }
	h = Gather(t.Context(), Options{NvidiaSMI: missing, TmpDir: dir}, wire.HealthRequest{})
	if st, _ := summary(h.Checks); h.GPUs != -1 || st != "gpu-driver=not_checked gpu-busy=not_checked gpu-ecc=not_checked gpu-remap=not_checked gpu-retired=not_checked tmpdir=ok" {
		t.Errorf("without nvidia-smi: %d GPUs, %s", h.GPUs, st)
	}
	h = Gather(t.Context(), Options{NvidiaSMI: missing, TmpDir: filepath.Join(dir, "gone")}, wire.HealthRequest{})
	if _, fails := summary(h.Checks); !strings.Contains(fails, "tmpdir: TMPDIR "+dir+"/gone does not exist") {
		t.Errorf("missing TMPDIR: %s", fails)
	}
}

// TestGatherBoundsNvidiaSMI: an nvidia-smi that does not answer fails
// the driver check on a host whose driver lists GPUs, within
// SMITimeout, instead of holding the attempt.
func TestGatherBoundsNvidiaSMI(t *testing.T) {
	hang := func(ctx context.Context, _ ...string) ([]byte, error) {
		<-ctx.Done()
		return nil, fmt.Errorf("nvidia-smi: %w", ctx.Err())
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second) // stands in for SMITimeout
	defer cancel()
	h := Gather(ctx, Options{NvidiaSMI: hang, DriverGPUs: 8, TmpDir: t.TempDir()}, wire.HealthRequest{})
	if _, fails := summary(h.Checks); h.GPUs != -1 || !strings.Contains(fails, "gpu-driver: nvidia-smi failed with 8 GPUs in /proc/driver/nvidia: nvidia-smi: context deadline exceeded") {
		t.Errorf("a hung nvidia-smi: %d GPUs, failures %q", h.GPUs, fails)
	}
}
