package agent

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/agent/facts"
	"github.com/gangway-hpc/gangway/agent/wire"
)

func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"0", []int{0}}, {"0-3", []int{0, 1, 2, 3}}, {"0-1,8,10-11", []int{0, 1, 8, 10, 11}}, {"", nil},
	} {
		got, err := parseCPUList(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: got %v %v, want %v", tc.in, got, err, tc.want)
		}
		if tc.in != "" && FormatCPUList(got) != tc.in {
			t.Errorf("format %v = %q, want %q", got, FormatCPUList(got), tc.in)
		}
	}
	for _, bad := range []string{"x", "3-1", "1-"} {
		if _, err := parseCPUList(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestBindCPUs(t *testing.T) {
	root := t.TempDir()
	for node, list := range map[string]string{"node0": "0-3", "node1": "4-7"} {
		d := filepath.Join(root, "sys/devices/system/node", node)
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "cpulist"), []byte(list+"\n"), 0o644)
	}
	a := &Agent{Facts: facts.Options{SysRoot: root}}
	f := wire.Facts{NUMANodes: 2, GPUs: []wire.GPU{{Index: 0, NUMANode: 0}, {Index: 5, NUMANode: 1}}}
	got, err := a.bindCPUs("numa", wire.RankSpec{Rank: 3, LocalRank: 0, GPUs: []int{5}}, f, nil)
	if err != nil || !reflect.DeepEqual(got, []int{4, 5, 6, 7}) {
		t.Fatalf("GPU 5 on node 1: got %v %v", got, err)
	}
	got, _ = a.bindCPUs("numa", wire.RankSpec{LocalRank: 2}, wire.Facts{NUMANodes: 2}, nil)
	if !reflect.DeepEqual(got, []int{0, 1, 2, 3}) {
		t.Fatalf("no GPU, local rank 2 of 2 nodes: got %v", got)
	}
	got, _ = a.bindCPUs("core", wire.RankSpec{LocalRank: 5}, f, []int{0, 1, 2, 3})
	if !reflect.DeepEqual(got, []int{1}) {
		t.Fatalf("core: got %v", got)
	}
	if got, _ := a.bindCPUs("none", wire.RankSpec{}, f, nil); got != nil {
		t.Fatalf("none: got %v", got)
	}
}

// TestBindCPUsNewForms: pe=N gives N consecutive allowed CPUs per local
// rank; socket deals sockets round robin and socket:N gives N
// consecutive local ranks one socket; hwthread is one CPU per rank.
func TestBindCPUsNewForms(t *testing.T) {
	root := t.TempDir()
	for c := range 8 {
		d := filepath.Join(root, "sys/devices/system/cpu", "cpu"+strconv.Itoa(c), "topology")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "physical_package_id"), []byte(strconv.Itoa(c/4)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := &Agent{Facts: facts.Options{SysRoot: root}}
	allowed := []int{0, 1, 2, 3, 4, 5, 6, 7}
	for _, tc := range []struct {
		mode  string
		local int
		want  []int
		err   string
	}{
		{"pe=2", 0, []int{0, 1}, ""},
		{"pe=2", 3, []int{6, 7}, ""},
		{"pe=3", 2, nil, "PE=3 needs CPUs 6-8"},
		{"hwthread", 5, []int{5}, ""},
		{"socket", 0, []int{0, 1, 2, 3}, ""},
		{"socket", 1, []int{4, 5, 6, 7}, ""},
		{"socket", 2, []int{0, 1, 2, 3}, ""},
		{"socket:2", 1, []int{0, 1, 2, 3}, ""},
		{"socket:2", 2, []int{4, 5, 6, 7}, ""},
		{"socket:2", 4, nil, "needs socket 2"},
		{"pe=x", 0, nil, "want pe=N"},
	} {
		got, err := a.bindCPUs(tc.mode, wire.RankSpec{LocalRank: tc.local}, wire.Facts{}, allowed)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s local %d: err %v, want %q", tc.mode, tc.local, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s local %d: got %v %v, want %v", tc.mode, tc.local, got, err, tc.want)
		}
	}
}
