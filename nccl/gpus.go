package nccl

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ErrNotEnoughGPUs is wrapped when a host has fewer free GPUs than ranks.
var ErrNotEnoughGPUs = errors.New("not enough free GPUs")

// searchBudget bounds the exhaustive search: subsets times ring orders.
// 4 of 8 GPUs costs 70*3!, 8 of 8 costs 7!; 8 of 16 (12870*7!) goes greedy.
const searchBudget = 2_000_000

// MaxSearchGPUs caps the topology search: a host with more free GPUs gets
// the first n, in index order.
const MaxSearchGPUs = 16

// maxExactRing is the largest ring ordered by trying every permutation.
const maxExactRing = 9

// linkScore ranks a `nvidia-smi topo -m` connection: NV# by its number of
// links, above every PCIe path, then PIX > PXB > PHB > NODE > SYS.
// Unknown connections score 0.
func linkScore(s string) int {
	switch s {
	case "PIX":
		return 5
	case "PXB":
		return 4
	case "PHB":
		return 3
	case "NODE":
		return 2
	case "SYS", "SOC":
		return 1
	}
	if k, err := strconv.Atoi(strings.TrimPrefix(s, "NV")); err == nil && strings.HasPrefix(s, "NV") && k > 0 {
		return 100 + k
	}
	return 0
}

// ringScore is how good a set of GPUs is: its best ring's weakest link,
// then that ring's total, then the total over all pairs (a fully connected
// group beats a ring with the same links).
type ringScore struct{ min, sum, pairs int }

func (a ringScore) better(b ringScore) bool {
	if a.min != b.min {
		return a.min > b.min
	}
	if a.sum != b.sum {
		return a.sum > b.sum
	}
	return a.pairs > b.pairs
}

// ChooseGPUs picks n of a host's free GPUs for its n ranks and orders them
// so that ring neighbours (local rank i and i+1, and the last and first)
// are joined by the best links. topo is the GPU x GPU matrix of
// `nvidia-smi topo -m` (wire.Topo.Link) indexed by GPU index; free are GPU
// indices, in any order.
//
// The chosen set maximises its best ring's weakest link, then that ring's
// total score, then the total over all pairs; ties go to the set with the
// lowest indices and to the ring that is lexicographically first from its
// lowest GPU. With uniform links (NVSwitch: DGX A100, H100) this is the
// first n free GPUs in order. The search is exhaustive while it is cheap
// (up to 8 free GPUs always is); beyond that, a greedy search grows a set
// from each free GPU and improves it by swaps. Without a topology, or with
// more than MaxSearchGPUs free, the first n free GPUs are used.
func ChooseGPUs(topo [][]string, free []int, n int) ([]int, error) {
	if n < 1 {
		return nil, fmt.Errorf("choose GPUs: want at least one, got %d", n)
	}
	f := slices.Clone(free)
	slices.Sort(f)
	for i := 1; i < len(f); i++ {
		if f[i] == f[i-1] {
			return nil, fmt.Errorf("choose GPUs: GPU %d listed twice as free", f[i])
		}
	}
	if len(f) < n {
		return nil, fmt.Errorf("choose GPUs: %w: %d ranks, %d free (%v)", ErrNotEnoughGPUs, n, len(f), f)
	}
	if len(topo) == 0 || len(f) > MaxSearchGPUs {
		return f[:n], nil
	}
	for i, row := range topo {
		if len(row) != len(topo) {
			return nil, fmt.Errorf("choose GPUs: topology row %d has %d entries, want %d", i, len(row), len(topo))
		}
	}
	for _, g := range f {
		if g < 0 || g >= len(topo) {
			return nil, fmt.Errorf("choose GPUs: free GPU %d not in the %d-GPU topology", g, len(topo))
		}
	}
	score := make([][]int, len(topo))
	for i, row := range topo {
		score[i] = make([]int, len(row))
		for j, s := range row {
			score[i][j] = linkScore(s)
		}
	}
	if cost(len(f), n) <= searchBudget {
		return exhaustive(score, f, n), nil
	}
	return greedy(score, f, n), nil
}

// cost estimates the exhaustive search: C(free, n) subsets, (n-1)! rings.
func cost(free, n int) float64 {
	if n > maxExactRing {
		return math.Inf(1)
	}
	c := 1.0
	for i := range n {
		c = c * float64(free-i) / float64(i+1)
	}
	for i := 2; i < n; i++ {
		c *= float64(i)
	}
	return c
}

// exhaustive scores every n-subset of the sorted free GPUs.
func exhaustive(score [][]int, free []int, n int) []int {
	var best []int
	var bestScore ringScore
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	set := make([]int, n)
	for {
		for i, j := range idx {
			set[i] = free[j]
		}
		ring, s := bestRing(score, set)
		if best == nil || s.better(bestScore) {
			best, bestScore = ring, s
		}
		// Next combination in lexicographic order.
		i := n - 1
		for i >= 0 && idx[i] == len(free)-n+i {
			i--
		}
		if i < 0 {
			return best
		}
		idx[i]++
		for j := i + 1; j < n; j++ {
			idx[j] = idx[j-1] + 1
		}
	}
}

// greedy grows a set from each free GPU by cheapest ring insertion, then
// improves it by swapping one member for an outsider while that helps, and
// keeps the best set over all seeds.
func greedy(score [][]int, free []int, n int) []int {
	var best []int
	var bestScore ringScore
	for _, seed := range free {
		set := improve(score, free, grow(score, free, seed, n))
		slices.Sort(set)
		ring, s := bestRing(score, set)
		if best == nil || s.better(bestScore) {
			best, bestScore = ring, s
		}
	}
	return best
}

// grow builds a ring of n GPUs from seed, each step inserting the GPU and
// position that give the best ring (lowest GPU, then earliest position, on
// ties).
func grow(score [][]int, free []int, seed, n int) []int {
	ring := []int{seed}
	for len(ring) < n {
		var next []int
		var nextScore ringScore
		for _, c := range free {
			if slices.Contains(ring, c) {
				continue
			}
			for pos := 1; pos <= len(ring); pos++ {
				cand := slices.Insert(slices.Clone(ring), pos, c)
				if s := scoreRing(score, cand); next == nil || s.better(nextScore) {
					next, nextScore = cand, s
				}
			}
		}
		ring = next
	}
	return ring
}

// insertionScore scores a set by the ring built by inserting its GPUs in
// order, each at its best position: cheap, and good enough to compare sets.
func insertionScore(score [][]int, set []int) ringScore {
	ring := []int{set[0]}
	for _, c := range set[1:] {
		var next []int
		var nextScore ringScore
		for pos := 1; pos <= len(ring); pos++ {
			cand := slices.Insert(slices.Clone(ring), pos, c)
			if s := scoreRing(score, cand); next == nil || s.better(nextScore) {
				next, nextScore = cand, s
			}
		}
		ring = next
	}
	s := scoreRing(score, ring)
	for i, a := range set {
		for _, b := range set[i+1:] {
			s.pairs += score[a][b]
		}
	}
	return s
}

// improve swaps one member of set for a free GPU outside it while that
// gives a better insertionScore, for at most len(free) rounds.
func improve(score [][]int, free, set []int) []int {
	set = slices.Clone(set)
	slices.Sort(set)
	cur := insertionScore(score, set)
	for range len(free) {
		improved := false
		for i := 0; i < len(set) && !improved; i++ {
			for _, c := range free {
				if slices.Contains(set, c) {
					continue
				}
				cand := slices.Clone(set)
				cand[i] = c
				slices.Sort(cand)
				if s := insertionScore(score, cand); s.better(cur) {
					set, cur, improved = cand, s, true
					break
				}
			}
		}
		if !improved {
			break
		}
	}
	return set
}

// bestRing orders a sorted set into its best ring, starting at its lowest
// GPU: every order for small sets, nearest neighbour beyond maxExactRing.
// The score's pairs is the total over all pairs of the set.
func bestRing(score [][]int, set []int) ([]int, ringScore) {
	pairs := 0
	for i, a := range set {
		for _, b := range set[i+1:] {
			pairs += score[a][b]
		}
	}
	if len(set) > maxExactRing {
		ring := nearestRing(score, set)
		s := scoreRing(score, ring)
		s.pairs = pairs
		return ring, s
	}
	var best []int
	var bestScore ringScore
	perm := slices.Clone(set)
	for {
		s := scoreRing(score, perm)
		if best == nil || s.better(bestScore) {
			best, bestScore = slices.Clone(perm), s
		}
		if !nextPermutation(perm[1:]) {
			break
		}
	}
	bestScore.pairs = pairs
	return best, bestScore
}

// scoreRing scores the cycle ring[0] -> ring[1] -> ... -> ring[0].
func scoreRing(score [][]int, ring []int) ringScore {
	if len(ring) == 1 {
		return ringScore{}
	}
	s := ringScore{min: math.MaxInt}
	for i, a := range ring {
		l := score[a][ring[(i+1)%len(ring)]]
		s.min = min(s.min, l)
		s.sum += l
	}
	return s
}

// nearestRing walks from the lowest GPU to the best-linked unvisited one.
func nearestRing(score [][]int, set []int) []int {
	ring := []int{set[0]}
	left := slices.Clone(set[1:])
	for len(left) > 0 {
		last, pick := ring[len(ring)-1], 0
		for i, c := range left {
			if score[last][c] > score[last][left[pick]] {
				pick = i
			}
		}
		ring = append(ring, left[pick])
		left = slices.Delete(left, pick, pick+1)
	}
	return ring
}

// nextPermutation advances p to its next lexicographic permutation and
// reports whether there was one.
func nextPermutation(p []int) bool {
	i := len(p) - 2
	for i >= 0 && p[i] >= p[i+1] {
		i--
	}
	if i < 0 {
		return false
	}
	j := len(p) - 1
	for p[j] <= p[i] {
		j--
	}
	p[i], p[j] = p[j], p[i]
	slices.Reverse(p[i+1:])
	return true
}
