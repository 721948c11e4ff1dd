package facts

import (
	"cmp"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// dgx1 is the DGX-1 (V100) hybrid cube-mesh as NVIDIA documents it: two
// fully connected quads with one or two NVLinks per pair, plus one link from
// each GPU to its twin in the other quad.
var dgx1 = [][]string{
	{"X", "NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS"},
	{"NV1", "X", "NV2", "NV1", "SYS", "NV2", "SYS", "SYS"},
	{"NV1", "NV2", "X", "NV2", "SYS", "SYS", "NV1", "SYS"},
	{"NV2", "NV1", "NV2", "X", "SYS", "SYS", "SYS", "NV1"},
	{"NV2", "SYS", "SYS", "SYS", "X", "NV1", "NV1", "NV2"},
	{"SYS", "NV2", "SYS", "SYS", "NV1", "X", "NV2", "NV1"},
	{"SYS", "SYS", "NV1", "SYS", "NV1", "NV2", "X", "NV2"},
	{"SYS", "SYS", "SYS", "NV1", "NV2", "NV1", "NV2", "X"},
}

// uniform is an n-GPU matrix with the same link between every pair.
func uniform(n int, link string) [][]string {
	m := make([][]string, n)
	for i := range m {
		m[i] = make([]string, n)
		for j := range m[i] {
			m[i][j] = link
		}
		m[i][i] = "X"
	}
	return m
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseTopoFixtures(t *testing.T) {
	rep := func(n int, cpus ...string) []string {
		var out []string
		for _, c := range cpus {
			for range n {
				out = append(out, c)
			}
		}
		return out
	}
	for _, tc := range []struct {
		file string
		want [][]string
		cpus []string
		numa []int
	}{
		{"topo-dgx1-v100.txt", dgx1, rep(4, "0-19,40-59", "20-39,60-79"), []int{0, 0, 0, 0, 1, 1, 1, 1}},
		{"topo-dgx-a100.txt", uniform(8, "NV12"), rep(2, "48-63,176-191", "16-31,144-159", "112-127,240-255", "80-95,208-223"),
			[]int{3, 3, 1, 1, 7, 7, 5, 5}},
		{"topo-hgx-h100.txt", uniform(8, "NV18"), rep(4, "0-55,112-167", "56-111,168-223"), []int{0, 0, 0, 0, 1, 1, 1, 1}},
		// A VM's passed-through GPU: terminal escapes, a "$ command"
		// line and an exit status around the table.
		{"topo-h100-vm.txt", [][]string{{"X"}}, []string{"0-15"}, []int{0}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			topo, err := ParseTopo(readFixture(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(topo.Link, tc.want) {
				t.Errorf("matrix:\n got %v\nwant %v", topo.Link, tc.want)
			}
			if !reflect.DeepEqual(topo.CPUs, tc.cpus) || !reflect.DeepEqual(topo.NUMA, tc.numa) {
				t.Errorf("affinity: cpus %q numa %v, want %q %v", topo.CPUs, topo.NUMA, tc.cpus, tc.numa)
			}
		})
	}
}

func TestParseTopo(t *testing.T) {
	const hdr = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
	for _, tc := range []struct {
		name, in string
		want     [][]string
		cpus     []string
		numa     []int
		err      string
	}{
		{name: "two PCIe GPUs", in: hdr + "GPU0\t X \tPHB\t0-63\t0\t\tN/A\nGPU1\tPHB\t X \t0-63\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n",
			want: [][]string{{"X", "PHB"}, {"PHB", "X"}}, cpus: []string{"0-63", "0-63"}, numa: []int{0, 0}},
		{name: "single GPU", in: "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-7\t\tN/A\t\tN/A\n",
			want: [][]string{{"X"}}, cpus: []string{"0-7"}, numa: []int{-1}},
		{name: "terminal escapes", in: "\t\x1b[4mGPU0\tGPU1\tmlx5_0\tCPU Affinity\x1b[0m\n\x1b[4mGPU0\t\x1b[0m X \tNV4\tPIX\t0-7\n\x1b[4mGPU1\t\x1b[0mNV4\t X \tPIX\t0-7\n",
			want: [][]string{{"X", "NV4"}, {"NV4", "X"}}, cpus: []string{"0-7", "0-7"}},
		{name: "old SOC name", in: "\tGPU0\tGPU1\n GPU0\t X \tSOC\nGPU1\tSOC\t X\n",
			want: [][]string{{"X", "SOC"}, {"SOC", "X"}}},
		{name: "affinity N/A", in: hdr + "GPU0\t X \tPHB\tN/A\tN/A\nGPU1\tPHB\t X \t0,2,4-6\t1\n",
			want: [][]string{{"X", "PHB"}, {"PHB", "X"}}, cpus: []string{"", "0,2,4-6"}, numa: []int{-1, 1}},
		{name: "affinity cells missing", in: hdr + "GPU0\t X \tPHB\nGPU1\tPHB\t X \t0-3\n",
			want: [][]string{{"X", "PHB"}, {"PHB", "X"}}, cpus: []string{"", "0-3"}, numa: []int{-1, -1}},
		{name: "bad CPU list", in: hdr + "GPU0\t X \tPHB\t7-3\t0\nGPU1\tPHB\t X \t0-3\t0\n", err: `topo:2: GPU0: CPU affinity "7-3"`},
		{name: "bad NUMA node", in: hdr + "GPU0\t X \tPHB\t0-3\t0\nGPU1\tPHB\t X \t0-3\tnode1\n", err: `topo:3: GPU1: NUMA affinity "node1"`},
		{name: "huge NUMA node", in: hdr + "GPU0\t X \tPHB\t0-3\t99999\nGPU1\tPHB\t X \t0-3\t0\n", err: `NUMA affinity "99999"`},
		{name: "empty", in: "", err: "no header"},
		{name: "no GPUs", in: "No devices were found\n", err: "no header"},
		{name: "row before header", in: "GPU0\t X \tNV1\n", err: "topo:1: GPU row before the header"},
		{name: "header gap", in: "\tGPU0\tGPU2\nGPU0 X NV1\n", err: `topo:1: header column "GPU2", want GPU1`},
		{name: "missing row", in: hdr + "GPU0\t X \tPHB\t0-63\t0\n", err: "header names 2 GPUs, found 1 rows"},
		{name: "rows out of order", in: hdr + "GPU1\tPHB\t X \nGPU0\t X \tPHB\n", err: `topo:2: row "GPU1", want GPU0`},
		{name: "short row", in: hdr + "GPU0\t X\n", err: "topo:2: GPU0 has 1 GPU columns, want 2"},
		{name: "diagonal", in: hdr + "GPU0\tPHB\tPHB\nGPU1\tPHB\t X\n", err: `GPU0 to itself is "PHB"`},
		{name: "unknown link", in: hdr + "GPU0\t X \tFOO\nGPU1\tFOO\t X\n", err: `topo:2: GPU0 to GPU1: unknown connection "FOO"`},
		{name: "NV0", in: hdr + "GPU0\t X \tNV0\nGPU1\tNV0\t X\n", err: `unknown connection "NV0"`},
		{name: "asymmetric", in: hdr + "GPU0\t X \tNV2\nGPU1\tNV1\t X\n", err: "GPU1 to GPU0 is NV1 but GPU0 to GPU1 is NV2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo, err := ParseTopo([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(topo.Link, tc.want) {
				t.Errorf("got %v, want %v", topo.Link, tc.want)
			}
			if !reflect.DeepEqual(topo.CPUs, tc.cpus) || !reflect.DeepEqual(topo.NUMA, tc.numa) {
				t.Errorf("affinity: cpus %q numa %v, want %q %v", topo.CPUs, topo.NUMA, tc.cpus, tc.numa)
			}
		})
	}
}

// renderTopo prints a topology the way nvidia-smi does, without NICs;
// the affinity columns only where topo has them.
func renderTopo(topo *wire.Topo) string {
	var b strings.Builder
	for i := range topo.Link {
		b.WriteString("\tGPU" + strconv.Itoa(i))
	}
	if topo.CPUs != nil {
		b.WriteString("\tCPU Affinity")
	}
	if topo.NUMA != nil {
		b.WriteString("\tNUMA Affinity\tGPU NUMA ID")
	}
	b.WriteString("\n")
	for i, row := range topo.Link {
		b.WriteString("GPU" + strconv.Itoa(i))
		for _, c := range row {
			b.WriteString("\t" + c)
		}
		if topo.CPUs != nil {
			b.WriteString("\t" + cmp.Or(topo.CPUs[i], "N/A"))
		}
		if topo.NUMA != nil {
			n := "N/A"
			if topo.NUMA[i] >= 0 {
				n = strconv.Itoa(topo.NUMA[i])
			}
			b.WriteString("\t" + n + "\t\tN/A")
		}
		b.WriteString("\n")
	}
	return b.String()
}

func FuzzParseTopo(f *testing.F) {
	for _, name := range []string{"topo-dgx1-v100.txt", "topo-dgx-a100.txt", "topo-hgx-h100.txt", "topo-h100-vm.txt"} {
		f.Add(readFixture(f, name))
	}
	f.Add([]byte("\tGPU0\tGPU1\nGPU0\t X \tPHB\nGPU1\tPHB\t X \n"))
	f.Add([]byte("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPHB\tN/A\t1\nGPU1\tPHB\t X \t0,2-3\tN/A\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		topo, err := ParseTopo(in)
		if err != nil {
			return
		}
		n := len(topo.Link)
		if n == 0 {
			t.Fatal("success with no GPUs")
		}
		for i, row := range topo.Link {
			if len(row) != n || row[i] != "X" {
				t.Fatalf("row %d = %v in %d-GPU matrix", i, row, n)
			}
			for j := range row {
				if row[j] != topo.Link[j][i] {
					t.Fatalf("asymmetric at %d,%d", i, j)
				}
			}
		}
		for i := range topo.CPUs {
			if c := topo.CPUs[i]; c != "" && !validCPUList(c) {
				t.Fatalf("GPU%d: CPU affinity %q is no CPU list", i, c)
			}
		}
		if (topo.CPUs != nil && len(topo.CPUs) != n) || (topo.NUMA != nil && len(topo.NUMA) != n) {
			t.Fatalf("%d GPUs, %d CPU and %d NUMA affinities", n, len(topo.CPUs), len(topo.NUMA))
		}
		again, err := ParseTopo([]byte(renderTopo(topo)))
		if err != nil || !reflect.DeepEqual(again, topo) {
			t.Fatalf("re-parse of %+v: %+v, %v", topo, again, err)
		}
	})
}
