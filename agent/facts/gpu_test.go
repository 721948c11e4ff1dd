package facts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// fakeSMI answers nvidia-smi calls from a table keyed by the joined
// arguments; a missing key fails like a broken driver.
func fakeSMI(answers map[string][]byte) func(context.Context, ...string) ([]byte, error) {
	return func(_ context.Context, args ...string) ([]byte, error) {
		if out, ok := answers[strings.Join(args, " ")]; ok {
			return out, nil
		}
		return nil, fmt.Errorf("nvidia-smi %s: exit status 9: NVIDIA-SMI has failed", strings.Join(args, " "))
	}
}

func notFoundSMI(context.Context, ...string) ([]byte, error) {
	return nil, &exec.Error{Name: "nvidia-smi", Err: exec.ErrNotFound}
}

var queryKey = strings.Join(gpuQuery, " ")

func TestParseGPUQuery(t *testing.T) {
	gpus, err := ParseGPUQuery(readFixture(t, "smi-query-dgx-a100.csv"))
	if err != nil {
		t.Fatal(err)
	}
	wantBus := []string{"0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0",
		"0000:87:00.0", "0000:90:00.0", "0000:b7:00.0", "0000:bd:00.0"}
	if len(gpus) != len(wantBus) {
		t.Fatalf("got %d GPUs, want %d", len(gpus), len(wantBus))
	}
	for i, g := range gpus {
		if g.Index != i || g.BusID != wantBus[i] || g.Name != "NVIDIA A100-SXM4-80GB" || !strings.HasPrefix(g.UUID, "GPU-") {
			t.Errorf("gpu %d = %+v", i, g)
		}
	}

	for _, tc := range []struct{ in, err string }{
		{"0, GPU-1, 00000000:07:00.0\n", "nvidia-smi query:1: want 4 fields, got 3"},
		{"\nx, GPU-1, 00000000:07:00.0, A100\n", `nvidia-smi query:2: bad index "x"`},
		{"0, GPU-1, 07:00.0, A100\n", `bad PCI bus id "07:00.0"`},
	} {
		if _, err := ParseGPUQuery([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseGPUQuery(%q) err = %v, want %q", tc.in, err, tc.err)
		}
	}
}

func TestNormalizeBusID(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"00000000:07:00.0", "0000:07:00.0"},
		{"00000000:BD:00.0", "0000:bd:00.0"},
		{"0000:4e:00.1", "0000:4e:00.1"},
		{"00000001:0A:1F.7", "0001:0a:1f.7"},
		{"10000:01:00.0", "10000:01:00.0"},
		{"0:01:00.0", "0000:01:00.0"},
		{"07:00.0", ""},
		{"0000:7:00.0", ""},
		{"0000:07:00", ""},
		{"zz:07:00.0", ""},
		{"000000000:07:00.0", ""},
	} {
		got, err := NormalizeBusID(tc.in)
		if got != tc.want || (err != nil) != (tc.want == "") {
			t.Errorf("NormalizeBusID(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestGPUsFromNvidiaSMI(t *testing.T) {
	o := Options{SysRoot: "testdata/sysroot", NvidiaSMI: fakeSMI(map[string][]byte{
		queryKey:  readFixture(t, "smi-query-dgx-a100.csv"),
		"topo -m": readFixture(t, "topo-dgx-a100.txt"),
	})}
	gpus, topo, err := listGPUs(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	var numa []int
	for _, g := range gpus {
		numa = append(numa, g.NUMANode)
	}
	// testdata/sysroot/sys/bus/pci/devices/*/numa_node, matching the
	// NUMA Affinity column of topo-dgx-a100.txt.
	if want := []int{3, 3, 1, 1, 7, 7, 5, 5}; !reflect.DeepEqual(numa, want) {
		t.Errorf("numa nodes %v, want %v", numa, want)
	}
	if topo == nil || len(topo.Link) != 8 || topo.Link[3][6] != "NV12" {
		t.Errorf("topology %v", topo)
	}
	for _, g := range gpus {
		if g.NUMAFrom != "sysfs" || g.CPUs != topo.CPUs[g.Index] || g.CPUs == "" {
			t.Errorf("gpu %d: numa from %q, cpus %q: want sysfs and topo -m's %q", g.Index, g.NUMAFrom, g.CPUs, topo.CPUs[g.Index])
		}
	}
}

// TestGPUsInVM: a GPU passed through to a VM (an H100 on a lent machine,
// testdata/topo-h100-vm.txt as nvidia-smi 580 printed it there) sits on a
// virtual PCI bus whose numa_node is -1; topo -m says node 0, CPUs 0-15
// (lscpu there: one node, CPUs 0-15), and that is what the GPU gets.
func TestGPUsInVM(t *testing.T) {
	root := t.TempDir()
	dev := filepath.Join(root, "sys", "bus", "pci", "devices", "0000:00:06.0")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dev, "numa_node"), []byte("-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	query := []byte("0, GPU-e2d0ec95-1a81-707a-0c0f-ac30499a7b6a, 00000000:00:06.0, NVIDIA H100 80GB HBM3\n")
	want := wire.GPU{Index: 0, UUID: "GPU-e2d0ec95-1a81-707a-0c0f-ac30499a7b6a", BusID: "0000:00:06.0",
		Name: "NVIDIA H100 80GB HBM3", NUMANode: 0, NUMAFrom: "nvidia-smi", CPUs: "0-15"}
	gpus, topo, err := listGPUs(t.Context(), Options{SysRoot: root, NvidiaSMI: fakeSMI(map[string][]byte{
		queryKey: query, "topo -m": readFixture(t, "topo-h100-vm.txt"),
	})})
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 1 || gpus[0] != want || topo == nil {
		t.Errorf("got %+v, %v; want %+v", gpus, topo, want)
	}
	// Without topo -m (it failed), the node stays unknown, as sysfs says.
	gpus, _, err = listGPUs(t.Context(), Options{SysRoot: root, NvidiaSMI: fakeSMI(map[string][]byte{queryKey: query})})
	if err == nil || len(gpus) != 1 || gpus[0].NUMANode != -1 || gpus[0].NUMAFrom != "" || gpus[0].CPUs != "" {
		t.Errorf("no topology: %+v, %v", gpus, err)
	}
}

func TestGPUsFallback(t *testing.T) {
	want := []wire.GPU{
		{Index: 0, UUID: "GPU-2d8a1c3e-7f41-5b0c-9e6a-1f3c5d7e9a01", BusID: "0000:07:00.0", Name: "NVIDIA A100-SXM4-80GB", NUMANode: 3, NUMAFrom: "sysfs"},
		{Index: 1, UUID: "GPU-6b0e4f2a-3c19-8d57-a2e4-7c9b1d3f5e02", BusID: "0000:0f:00.0", Name: "NVIDIA A100-SXM4-80GB", NUMANode: 3, NUMAFrom: "sysfs"},
	}
	t.Run("nvidia-smi missing", func(t *testing.T) {
		gpus, topo, err := listGPUs(t.Context(), Options{SysRoot: "testdata/sysroot", NvidiaSMI: notFoundSMI})
		if err != nil {
			t.Errorf("missing nvidia-smi reported as a problem: %v", err)
		}
		if !reflect.DeepEqual(gpus, want) || topo != nil {
			t.Errorf("got %+v, %v; want %+v and no topology", gpus, topo, want)
		}
	})
	t.Run("nvidia-smi fails", func(t *testing.T) {
		gpus, _, err := listGPUs(t.Context(), Options{SysRoot: "testdata/sysroot", NvidiaSMI: fakeSMI(nil)})
		if err == nil || !strings.Contains(err.Error(), "NVIDIA-SMI has failed") {
			t.Errorf("err = %v, want the nvidia-smi failure", err)
		}
		if !reflect.DeepEqual(gpus, want) {
			t.Errorf("got %+v, want %+v", gpus, want)
		}
	})
	t.Run("no GPUs at all", func(t *testing.T) {
		gpus, topo, err := listGPUs(t.Context(), Options{SysRoot: t.TempDir(), NvidiaSMI: notFoundSMI})
		if gpus != nil || topo != nil || err != nil {
			t.Errorf("got %v, %v, %v; want nothing", gpus, topo, err)
		}
	})
	t.Run("topology disagrees", func(t *testing.T) {
		gpus, topo, err := listGPUs(t.Context(), Options{SysRoot: "testdata/sysroot", NvidiaSMI: fakeSMI(map[string][]byte{
			queryKey:  readFixture(t, "smi-query-single.csv"),
			"topo -m": readFixture(t, "topo-hgx-h100.txt"),
		})})
		if len(gpus) != 1 || gpus[0].NUMANode != -1 || topo != nil {
			t.Errorf("got %+v, %v", gpus, topo)
		}
		if err == nil || !strings.Contains(err.Error(), "shows 8 GPUs, the query 1") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("unparsable topology", func(t *testing.T) {
		_, topo, err := listGPUs(t.Context(), Options{SysRoot: "testdata/sysroot", NvidiaSMI: fakeSMI(map[string][]byte{
			queryKey:  readFixture(t, "smi-query-single.csv"),
			"topo -m": []byte("garbage\n"),
		})})
		if topo != nil || err == nil || !strings.Contains(err.Error(), "topo -m: topo: no header") {
			t.Errorf("got %v, %v", topo, err)
		}
	})
	if !errors.Is(func() error { _, err := notFoundSMI(t.Context()); return err }(), exec.ErrNotFound) {
		t.Fatal("notFoundSMI does not look like a missing binary")
	}
}

// TestRunNvidiaSMI runs the default nvidia-smi runner against scripts on a
// private PATH.
func TestRunNvidiaSMI(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", dir)
	if _, err := runNvidiaSMI(t.Context(), "-L"); !errors.Is(err, exec.ErrNotFound) {
		t.Fatalf("no nvidia-smi on PATH: err = %v, want exec.ErrNotFound", err)
	}
	write(t, dir, map[string]string{"nvidia-smi": "#!/bin/sh\n" +
		`if [ "$1" = topo ]; then echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."; exit 9; fi` + "\n" +
		`echo "0, GPU-x, 00000000:01:00.0, $*"` + "\n"})
	if err := os.Chmod(filepath.Join(dir, "nvidia-smi"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := runNvidiaSMI(t.Context(), "a", "b")
	if err != nil || string(out) != "0, GPU-x, 00000000:01:00.0, a b\n" {
		t.Errorf("got %q, %v", out, err)
	}
	_, err = runNvidiaSMI(t.Context(), "topo", "-m")
	if err == nil || !strings.Contains(err.Error(), "nvidia-smi topo -m: exit status 9: NVIDIA-SMI has failed") {
		t.Errorf("err = %v", err)
	}
}
