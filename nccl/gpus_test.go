package nccl

import (
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// dgx1 is the DGX-1 (V100) hybrid cube-mesh, as in
// agent/facts/testdata/topo-dgx1-v100.txt: quads 0-3 and 4-7 fully
// connected by one or two NVLinks, GPU i linked to i+4 by two (0-4, 1-5)
// or one (2-6, 3-7), everything else SYS.
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

// uniform is an n-GPU matrix with one link type between every pair
// (NVSwitch systems: NV12 on DGX A100, NV18 on H100 HGX).
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

// pcie4 is a PCIe box: GPUs 0,1 under one switch, 2,3 under another on the
// other socket.
var pcie4 = [][]string{
	{"X", "PIX", "SYS", "SYS"},
	{"PIX", "X", "SYS", "SYS"},
	{"SYS", "SYS", "X", "PIX"},
	{"SYS", "SYS", "PIX", "X"},
}

func all8() []int { return []int{0, 1, 2, 3, 4, 5, 6, 7} }

func TestChooseGPUs(t *testing.T) {
	for _, tc := range []struct {
		name string
		topo [][]string
		free []int
		n    int
		want []int
	}{
		// DGX-1: a quad, as a ring 0-1 (NV1), 1-2, 2-3, 3-0 (NV2): the
		// quad's best ring; {0,3,7,4} has as good a ring but two SYS pairs.
		{"dgx1 4 of 8", dgx1, all8(), 4, []int{0, 1, 2, 3}},
		{"dgx1 4 of 8 shuffled", dgx1, []int{7, 3, 5, 1, 0, 6, 2, 4}, 4, []int{0, 1, 2, 3}},
		{"dgx1 4, first quad busy", dgx1, []int{1, 2, 4, 5, 6, 7}, 4, []int{4, 5, 6, 7}},
		// The first NV2 pair: 0-3.
		{"dgx1 2 of 8", dgx1, all8(), 2, []int{0, 3}},
		{"dgx1 2 of 0,1,4,5", dgx1, []int{0, 1, 4, 5}, 2, []int{0, 4}},
		{"dgx1 2 of 0,5,6", dgx1, []int{0, 5, 6}, 2, []int{5, 6}},
		// No NV2 triangle exists; two NV2 links and one NV1 is best.
		{"dgx1 3 of 8", dgx1, all8(), 3, []int{0, 2, 3}},
		// All eight: the NV2 links form one ring, 0-3-2-1-5-6-7-4.
		{"dgx1 8 of 8", dgx1, all8(), 8, []int{0, 3, 2, 1, 5, 6, 7, 4}},
		{"dgx1 1 of 8", dgx1, []int{6, 2}, 1, []int{2}},
		{"a100 4 of 8", uniform(8, "NV12"), all8(), 4, []int{0, 1, 2, 3}},
		{"a100 3 of some", uniform(8, "NV12"), []int{6, 2, 5, 7}, 3, []int{2, 5, 6}},
		{"a100 8 of 8", uniform(8, "NV12"), all8(), 8, all8()},
		{"h100 2 of 8", uniform(8, "NV18"), all8(), 2, []int{0, 1}},
		{"h100 5 of 6", uniform(8, "NV18"), []int{1, 2, 4, 5, 6, 7}, 5, []int{1, 2, 4, 5, 6}},
		{"pcie 2 of 4", pcie4, []int{0, 1, 2, 3}, 2, []int{0, 1}},
		{"pcie 2 of 1,2,3", pcie4, []int{1, 2, 3}, 2, []int{2, 3}},
		{"no topology", nil, []int{5, 3, 4}, 2, []int{3, 4}},
		// 16 GPUs, 8 ranks: too many subsets, greedy. GPUs 8-15 are
		// linked by NV4, 0-7 by NV1.
		{"greedy 8 of 16", twoIslands(), seq(16), 8, []int{8, 9, 10, 11, 12, 13, 14, 15}},
		{"greedy 12 of 16 uniform", uniform(16, "NV6"), seq(16), 12, seq(12)},
		// Beyond MaxSearchGPUs free: no search, the first n.
		{"17 free", twoIslands17(), seq(17), 4, []int{0, 1, 2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ChooseGPUs(tc.topo, tc.free, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func twoIslands() [][]string {
	m := uniform(16, "SYS")
	for i := range 16 {
		for j := range 16 {
			switch {
			case i == j:
			case i < 8 && j < 8:
				m[i][j] = "NV1"
			case i >= 8 && j >= 8:
				m[i][j] = "NV4"
			}
		}
	}
	return m
}

// twoIslands17 is twoIslands plus a GPU 16 that is SYS to all: a search
// would pick from 8-15.
func twoIslands17() [][]string {
	m := uniform(17, "SYS")
	for i, row := range twoIslands() {
		copy(m[i], row)
	}
	return m
}

// TestDGX1RingNeighbours checks that every ring the DGX-1 gets, for every
// rank count, joins neighbours by NVLink.
func TestDGX1RingNeighbours(t *testing.T) {
	for n := 2; n <= 8; n++ {
		got, err := ChooseGPUs(dgx1, all8(), n)
		if err != nil {
			t.Fatal(err)
		}
		for i, g := range got {
			next := got[(i+1)%len(got)]
			if n >= 3 && !strings.HasPrefix(dgx1[g][next], "NV") {
				t.Errorf("%d GPUs %v: %d-%d is %s", n, got, g, next, dgx1[g][next])
			}
		}
	}
}

// TestGreedyAgreesOnDGX1 runs the greedy fallback where the exhaustive
// search is affordable: its sets must be as good (ties may differ).
func TestGreedyAgreesOnDGX1(t *testing.T) {
	score := scores(dgx1)
	for n := 1; n <= 8; n++ {
		e, g := exhaustive(score, all8(), n), greedy(score, all8(), n)
		_, es := bestRing(score, sorted(e))
		_, gs := bestRing(score, sorted(g))
		if es != gs {
			t.Errorf("%d GPUs: exhaustive %v %+v, greedy %v %+v", n, e, es, g, gs)
		}
	}
}

func scores(topo [][]string) [][]int {
	s := make([][]int, len(topo))
	for i := range topo {
		s[i] = make([]int, len(topo))
		for j := range topo[i] {
			s[i][j] = linkScore(topo[i][j])
		}
	}
	return s
}

func sorted(s []int) []int {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestChooseGPUsErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		topo [][]string
		free []int
		n    int
		err  string
	}{
		{"too few", dgx1, []int{1, 2}, 3, "choose GPUs: not enough free GPUs: 3 ranks, 2 free ([1 2])"},
		{"none", dgx1, nil, 1, "not enough free GPUs: 1 ranks, 0 free"},
		{"zero ranks", dgx1, all8(), 0, "want at least one, got 0"},
		{"duplicate", dgx1, []int{1, 1, 2}, 2, "GPU 1 listed twice"},
		{"out of range", dgx1, []int{1, 8}, 2, "free GPU 8 not in the 8-GPU topology"},
		{"negative", dgx1, []int{-1, 2}, 2, "free GPU -1 not in"},
		{"ragged", [][]string{{"X", "NV1"}, {"NV1"}}, []int{0, 1}, 2, "row 1 has 1 entries, want 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ChooseGPUs(tc.topo, tc.free, tc.n)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
			if tc.name == "too few" && !errors.Is(err, ErrNotEnoughGPUs) {
				t.Errorf("%v is not ErrNotEnoughGPUs", err)
			}
		})
	}
}

func TestLinkScoreOrder(t *testing.T) {
	order := []string{"NV18", "NV12", "NV2", "NV1", "PIX", "PXB", "PHB", "NODE", "SYS", "BOGUS"}
	for i := 1; i < len(order); i++ {
		if linkScore(order[i-1]) <= linkScore(order[i]) {
			t.Errorf("%s scores %d, not above %s (%d)", order[i-1], linkScore(order[i-1]), order[i], linkScore(order[i]))
		}
	}
	if linkScore("NV0") != 0 || linkScore("NVx") != 0 || linkScore("SOC") != linkScore("SYS") {
		t.Error("NV0/NVx/SOC scored wrong")
	}
}

// TestTopologiesMatchFacts keeps the literals above in step with the facts
// package's nvidia-smi fixtures (read as text: nccl does not import facts).
func TestTopologiesMatchFacts(t *testing.T) {
	for file, want := range map[string][][]string{
		"topo-dgx1-v100.txt": dgx1,
		"topo-dgx-a100.txt":  uniform(8, "NV12"),
		"topo-hgx-h100.txt":  uniform(8, "NV18"),
	} {
		b, err := os.ReadFile("../agent/facts/testdata/" + file)
		if err != nil {
			t.Fatal(err)
		}
		var got [][]string
		for line := range strings.SplitSeq(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 8 && strings.HasPrefix(f[0], "GPU") && !strings.HasPrefix(f[1], "GPU") {
				got = append(got, f[1:9])
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: GPU block %v, want %v", file, got, want)
		}
	}
}
