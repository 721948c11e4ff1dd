package wire

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"testing"
)

func TestProcessMapping(t *testing.T) {
	block16 := make([]int, 16)
	for r := range block16 {
		block16[r] = r / 8
	}
	tests := []struct {
		hostOfRank []int
		want       string
	}{
		// docs/pmi.md §1.5.
		{[]int{0, 0, 0, 0}, "(vector,(0,1,4))"},
		{[]int{0, 0, 1, 1}, "(vector,(0,2,2))"},
		{[]int{0, 1, 0, 1}, "(vector,(0,2,1))"},
		{[]int{0, 0, 0, 1}, "(vector,(0,1,3),(1,1,1))"},
		{block16, "(vector,(0,2,8))"},
		// Hydra's single-rank mapping.
		{[]int{0}, "(vector,(0,1,1))"},
		{[]int{0, 1}, "(vector,(0,2,1))"},
		{[]int{0, 0, 1, 1, 1, 2, 2, 2}, "(vector,(0,1,2),(1,2,3))"},
		{[]int{0, 0, 0, 1, 1, 1, 2}, "(vector,(0,2,3),(2,1,1))"},
		{[]int{0, 1, 2, 0, 1, 2, 0}, "(vector,(0,3,1))"},
		{[]int{0, 0, 1, 1, 0, 0, 1, 1}, "(vector,(0,2,2))"},
		{[]int{0, 1, 1, 0}, "(vector,(0,1,1),(1,1,2))"},
		// Node ids are relabelled by first appearance.
		{[]int{5, 5, 3, 3}, "(vector,(0,2,2))"},
		{[]int{7, 2, 7, 2}, "(vector,(0,2,1))"},
		// Not expressible.
		{[]int{0, 1, 0, 0}, ""},
		{[]int{0, 1, 2, 1}, ""},
		{[]int{0, 0, 1, 0, 1, 1}, ""},
		{[]int{0, -1}, ""},
		{nil, ""},
	}
	for _, tt := range tests {
		got := ProcessMapping(tt.hostOfRank)
		if got != tt.want {
			t.Errorf("ProcessMapping(%v) = %q, want %q", tt.hostOfRank, got, tt.want)
			continue
		}
		if got == "" {
			continue
		}
		dec, err := decodeMapping(got, len(tt.hostOfRank))
		if err != nil {
			t.Fatal(err)
		}
		if !samePartition(dec, tt.hostOfRank) {
			t.Errorf("%q decodes to %v, not the partition of %v", got, dec, tt.hostOfRank)
		}
	}
}

// TestProcessMappingProperty: block and cyclic placements over 1..8 nodes,
// 1..8 ranks per node, with an uneven last node, decode back exactly.
func TestProcessMappingProperty(t *testing.T) {
	for nodes := 1; nodes <= 8; nodes++ {
		for per := 1; per <= 8; per++ {
			for short := 0; short < per; short++ {
				size := nodes*per - short
				block := make([]int, size)
				cyclic := make([]int, size)
				for r := range size {
					block[r] = r / per
					cyclic[r] = r % nodes
				}
				for name, h := range map[string][]int{"block": block, "cyclic": cyclic} {
					m := ProcessMapping(h)
					dec, err := decodeMapping(m, size)
					if err != nil {
						t.Fatalf("%s nodes=%d per=%d size=%d: %q: %v", name, nodes, per, size, m, err)
					}
					if !slices.Equal(dec, h) {
						t.Fatalf("%s nodes=%d per=%d size=%d: %q decodes to %v, want %v", name, nodes, per, size, m, dec, h)
					}
				}
			}
		}
	}
	// Arbitrary placements: whatever is expressed must be right.
	rng := rand.New(rand.NewPCG(1, 2))
	expressed := 0
	for range 20000 {
		h := make([]int, 1+rng.IntN(12))
		for r := range h {
			h[r] = rng.IntN(3)
		}
		m := ProcessMapping(h)
		if m == "" {
			continue
		}
		expressed++
		dec, err := decodeMapping(m, len(h))
		if err != nil || !samePartition(dec, h) {
			t.Fatalf("%v: %q decodes to %v (%v)", h, m, dec, err)
		}
	}
	if expressed == 0 {
		t.Fatal("no random placement was expressible")
	}
}

var (
	mappingRE = regexp.MustCompile(`^\(vector((?:,\(\d+,\d+,\d+\))+)\)$`)
	blockRE   = regexp.MustCompile(`\((\d+),(\d+),(\d+)\)`)
)

// decodeMapping is MPICH 4.0.2's MPIR_NODEMAP_populate_ids_from_mapping:
// blocks are applied in order; once a block with start 0 has been seen, each
// further pass starts at the first block whose start is 0.
func decodeMapping(m string, size int) ([]int, error) {
	sm := mappingRE.FindStringSubmatch(m)
	if sm == nil {
		return nil, fmt.Errorf("bad mapping %q", m)
	}
	var blocks [][3]int
	for _, b := range blockRE.FindAllStringSubmatch(sm[1], -1) {
		var v [3]int
		for i := range v {
			v[i], _ = strconv.Atoi(b[i+1])
		}
		if v[1] == 0 || v[2] == 0 {
			return nil, fmt.Errorf("empty block in %q (MPICH would loop forever)", m)
		}
		blocks = append(blocks, v)
	}
	out := make([]int, 0, size)
	foundWrap := false
	for len(out) < size {
		b := 0
		for foundWrap && blocks[b][0] != 0 {
			b++
		}
		for ; b < len(blocks); b++ {
			if blocks[b][0] == 0 {
				foundWrap = true
			}
			for node := 0; node < blocks[b][1]; node++ {
				for p := 0; p < blocks[b][2]; p++ {
					out = append(out, blocks[b][0]+node)
					if len(out) == size {
						return out, nil
					}
				}
			}
		}
	}
	return out, nil
}

// samePartition reports whether a and b put the same ranks together.
func samePartition(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	ab, ba := map[int]int{}, map[int]int{}
	for i := range a {
		if x, ok := ab[a[i]]; ok && x != b[i] {
			return false
		}
		if y, ok := ba[b[i]]; ok && y != a[i] {
			return false
		}
		ab[a[i]], ba[b[i]] = b[i], a[i]
	}
	return true
}
