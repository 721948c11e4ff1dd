package wire

import (
	"strconv"
	"strings"
)

// ProcessMapping builds the PMI_process_mapping value for a placement, where
// hostOfRank[r] is the node of rank r.
//
// The result uses MPICH's vector grammar (docs/pmi.md §1.5): a list of
// (S,C,P) blocks, "C consecutive nodes starting at node S get P consecutive
// ranks each", wrapping around to the block with S==0 when the blocks cover
// fewer ranks than the job has. Neighbouring blocks with equal P are merged as
// hydra does, so block placement of 16 ranks on 2 nodes is (vector,(0,2,8))
// and cyclic placement of 4 ranks on 2 nodes is (vector,(0,2,1)).
//
// Node ids are relabelled in order of first appearance (rank 0's node becomes
// node 0): MPICH only compares node ids for equality. ProcessMapping returns ""
// when the placement is empty, has a negative node, or cannot be written as a
// repeated round over the nodes; MPICH then falls back to exchanging
// hostnames.
func ProcessMapping(hostOfRank []int) string {
	if len(hostOfRank) == 0 {
		return ""
	}
	// Relabel nodes by first appearance.
	label := make(map[int]int)
	nodes := make([]int, len(hostOfRank))
	for r, h := range hostOfRank {
		if h < 0 {
			return ""
		}
		id, ok := label[h]
		if !ok {
			id = len(label)
			label[h] = id
		}
		nodes[r] = id
	}

	// One round visits nodes 0, 1, ..., m-1 in order, each once, with a run
	// of P_k consecutive ranks on node k. The round ends where node 0 comes
	// back.
	var round []int // round[k] = ranks per visit of node k
	for r := 0; r < len(nodes); {
		n := nodes[r]
		if n == 0 && len(round) > 0 {
			break
		}
		if n != len(round) {
			return ""
		}
		run := 1
		for r+run < len(nodes) && nodes[r+run] == n {
			run++
		}
		round = append(round, run)
		r += run
	}

	// The whole placement must be the round repeated (and cut at the end).
	r := 0
	for r < len(nodes) {
		for node, per := range round {
			for i := 0; i < per && r < len(nodes); i++ {
				if nodes[r] != node {
					return ""
				}
				r++
			}
		}
	}

	var b strings.Builder
	b.WriteString("(vector")
	for start := 0; start < len(round); {
		count := 1
		for start+count < len(round) && round[start+count] == round[start] {
			count++
		}
		b.WriteString(",(")
		b.WriteString(strconv.Itoa(start))
		b.WriteByte(',')
		b.WriteString(strconv.Itoa(count))
		b.WriteByte(',')
		b.WriteString(strconv.Itoa(round[start]))
		b.WriteByte(')')
		start += count
	}
	b.WriteByte(')')
	return b.String()
}
