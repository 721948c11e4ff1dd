package plan

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/hostfile"
)

func FuzzParseRankSet(f *testing.F) {
	for _, s := range []string{"0", "3", "0,2,4-7", " 1 , 3-4 ", "5-5", "8-100", "", "a", "-1", "1,", "3-1", "1-", "1-2-3", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rs, err := ParseRankSet(s)
		if err != nil {
			return
		}
		if rs.All() {
			t.Fatalf("ParseRankSet(%q) succeeded with the unrestricted set", s)
		}
		if rs.Has(-1) {
			t.Fatalf("ParseRankSet(%q) has -1", s)
		}
		// Every listed rank is a member.
		for _, part := range strings.Split(s, ",") {
			lo, hi, _ := strings.Cut(strings.TrimSpace(part), "-")
			for _, n := range []string{lo, hi} {
				if n == "" {
					continue
				}
				r, err := strconv.Atoi(n)
				if err != nil {
					t.Fatalf("ParseRankSet(%q) accepted %q: %v", s, n, err)
				}
				if !rs.Has(r) {
					t.Fatalf("ParseRankSet(%q) lacks %d", s, r)
				}
			}
		}
	})
}

// decodePlan turns fuzz bytes into hosts: each pair of bytes is one host,
// slots (0..15) and max_slots (0..15, where 0 is unlimited).
func decodePlan(data []byte) []hostfile.Host {
	var hosts []hostfile.Host
	for i := 0; i+1 < len(data) && len(hosts) < 16; i += 2 {
		hosts = append(hosts, hostfile.Host{Name: "h" + strconv.Itoa(len(hosts)), Slots: int(data[i] % 16), MaxSlots: int(data[i+1] % 16)})
	}
	return hosts
}

func FuzzPlan(f *testing.F) {
	seeds := []struct {
		hosts         []byte
		np, nPerNode  int
		node, oversub bool
	}{
		{[]byte{2, 0, 3, 0, 1, 0}, 5, 0, false, false},
		{[]byte{2, 0, 3, 0, 1, 0}, 5, 0, true, false},
		{[]byte{2, 0, 1, 0}, 0, 0, false, false},
		{[]byte{2, 0, 2, 0}, 0, 1, false, false},
		{[]byte{4, 0, 2, 0}, 0, 2, true, false},
		{[]byte{2, 0}, 0, 3, false, true},
		{[]byte{2, 0, 1, 0}, 5, 0, false, true},
		{[]byte{2, 2, 1, 0}, 5, 0, false, true},
		{[]byte{2, 2, 1, 1}, 4, 0, false, true},
		{[]byte{1, 0, 0, 0, 1, 0}, 2, 0, false, false},
		{[]byte{0, 0, 0, 0}, 0, 0, false, false},
		{[]byte{2, 0, 2, 0}, 5, 0, false, false},
		{[]byte{2, 0}, -1, 0, false, false},
		{nil, 1, 0, false, false},
	}
	for _, s := range seeds {
		f.Add(s.hosts, s.np, s.nPerNode, s.node, s.oversub)
	}
	f.Fuzz(func(t *testing.T, data []byte, np, nPerNode int, node, oversub bool) {
		hosts := decodePlan(data)
		np %= 200 // keep allocations small; negative values stay negative
		nPerNode %= 20
		o := Options{MapBy: "slot", NPerNode: nPerNode, Oversubscribe: oversub}
		if node {
			o.MapBy = "node"
		}
		ranks, err := Ranks(hosts, np, o)
		if err != nil {
			return
		}
		if np > 0 && len(ranks) != np || len(ranks) == 0 {
			t.Fatalf("Ranks(%v, %d, %+v) gave %d ranks", hosts, np, o, len(ranks))
		}
		count := make([]int, len(hosts))
		locals := make([][]int, len(hosts))
		for i, r := range ranks {
			if r.Rank != i {
				t.Fatalf("rank %d at index %d", r.Rank, i)
			}
			if r.Host < 0 || r.Host >= len(hosts) {
				t.Fatalf("rank %d on host %d of %d", i, r.Host, len(hosts))
			}
			count[r.Host]++
			locals[r.Host] = append(locals[r.Host], r.LocalRank)
		}
		node0 := 0
		for h := range hosts {
			for l, lr := range locals[h] {
				if lr != l {
					t.Fatalf("host %d: local ranks %v, want 0..%d in rank order", h, locals[h], count[h]-1)
				}
			}
			for _, r := range ranks {
				if r.Host == h && (r.LocalSize != count[h] || r.NodeRank != node0) {
					t.Fatalf("rank %d on host %d: LocalSize %d NodeRank %d, want %d %d", r.Rank, h, r.LocalSize, r.NodeRank, count[h], node0)
				}
			}
			if count[h] > 0 {
				node0++
			}
			limit := hosts[h].Slots
			if nPerNode > 0 {
				limit = nPerNode
			}
			if !oversub && count[h] > limit {
				t.Fatalf("host %d: %d ranks on %d slots without --oversubscribe", h, count[h], limit)
			}
			if m := hosts[h].MaxSlots; oversub && nPerNode == 0 && m >= hosts[h].Slots && m > 0 && count[h] > m {
				t.Fatalf("host %d: %d ranks above max_slots %d", h, count[h], m)
			}
		}
		if np == 0 {
			want := 0
			for _, h := range hosts {
				if nPerNode > 0 {
					want += nPerNode
				} else {
					want += h.Slots
				}
			}
			if len(ranks) != want {
				t.Fatalf("Ranks(%v, 0, %+v) gave %d ranks, want every slot (%d)", hosts, o, len(ranks), want)
			}
		}
	})
}
