package plan

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/hostfile"
)

// hs builds hosts h0, h1, ... with the given slots.
func hs(slots ...int) []hostfile.Host {
	out := make([]hostfile.Host, len(slots))
	for i, s := range slots {
		out[i] = hostfile.Host{Name: "h" + strconv.Itoa(i), Slots: s}
	}
	return out
}

// withMax sets MaxSlots on hosts, in order.
func withMax(hosts []hostfile.Host, max ...int) []hostfile.Host {
	for i, m := range max {
		hosts[i].MaxSlots = m
	}
	return hosts
}

// rk is a Rank written compactly: rank, host, local rank, local size, node rank.
func rk(rank, host, local, localSize, node int) Rank {
	return Rank{Rank: rank, Host: host, LocalRank: local, LocalSize: localSize, NodeRank: node}
}

func TestPlan(t *testing.T) {
	tests := []struct {
		name  string
		hosts []hostfile.Host
		np    int
		opts  Options
		want  []Rank
	}{
		{"slot fills each host in order", hs(2, 3, 1), 5, Options{}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 0, 1, 2, 0),
			rk(2, 1, 0, 3, 1), rk(3, 1, 1, 3, 1), rk(4, 1, 2, 3, 1),
		}},
		{"explicit slot", hs(2, 3, 1), 6, Options{MapBy: "slot"}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 0, 1, 2, 0),
			rk(2, 1, 0, 3, 1), rk(3, 1, 1, 3, 1), rk(4, 1, 2, 3, 1),
			rk(5, 2, 0, 1, 2),
		}},
		{"node deals round robin over uneven hosts", hs(2, 3, 1), 5, Options{MapBy: "node"}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 1, 0, 2, 1), rk(2, 2, 0, 1, 2),
			rk(3, 0, 1, 2, 0), rk(4, 1, 1, 2, 1),
		}},
		{"node skips full hosts", hs(1, 3), 4, Options{MapBy: "node"}, []Rank{
			rk(0, 0, 0, 1, 0), rk(1, 1, 0, 3, 1), rk(2, 1, 1, 3, 1), rk(3, 1, 2, 3, 1),
		}},
		{"np 0 is every slot (slot)", hs(2, 1), 0, Options{}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 0, 1, 2, 0), rk(2, 1, 0, 1, 1),
		}},
		{"np 0 is every slot (node)", hs(2, 1), 0, Options{MapBy: "node"}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 1, 0, 1, 1), rk(2, 0, 1, 2, 0),
		}},
		{"-N 1, np 0", hs(2, 2), 0, Options{NPerNode: 1}, []Rank{
			rk(0, 0, 0, 1, 0), rk(1, 1, 0, 1, 1),
		}},
		{"-N 2 map-by node", hs(4, 2), 0, Options{NPerNode: 2, MapBy: "node"}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 1, 0, 2, 1), rk(2, 0, 1, 2, 0), rk(3, 1, 1, 2, 1),
		}},
		{"-N 2 with fewer ranks", hs(2, 2), 3, Options{NPerNode: 2}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 0, 1, 2, 0), rk(2, 1, 0, 1, 1),
		}},
		{"-N above slots with --oversubscribe", hs(2), 0, Options{NPerNode: 3, Oversubscribe: true}, []Rank{
			rk(0, 0, 0, 3, 0), rk(1, 0, 1, 3, 0), rk(2, 0, 2, 3, 0),
		}},
		{"oversubscribe without max_slots deals the extra round robin", hs(2, 1), 5, Options{Oversubscribe: true}, []Rank{
			rk(0, 0, 0, 3, 0), rk(1, 0, 1, 3, 0), rk(2, 1, 0, 2, 1),
			rk(3, 0, 2, 3, 0), rk(4, 1, 1, 2, 1),
		}},
		{"oversubscribe respects max_slots", withMax(hs(2, 1), 2), 5, Options{Oversubscribe: true}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 0, 1, 2, 0),
			rk(2, 1, 0, 3, 1), rk(3, 1, 1, 3, 1), rk(4, 1, 2, 3, 1),
		}},
		{"oversubscribe up to max_slots exactly", withMax(hs(1, 1), 2, 2), 4, Options{Oversubscribe: true}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 1, 0, 2, 1), rk(2, 0, 1, 2, 0), rk(3, 1, 1, 2, 1),
		}},
		{"oversubscribe map-by node", hs(1, 1), 3, Options{MapBy: "node", Oversubscribe: true}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 1, 0, 1, 1), rk(2, 0, 1, 2, 0),
		}},
		{"oversubscribe not needed changes nothing", hs(2, 2), 3, Options{Oversubscribe: true}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 0, 1, 2, 0), rk(2, 1, 0, 1, 1),
		}},
		{"NodeRank skips a host without ranks", hs(1, 0, 1), 2, Options{}, []Rank{
			rk(0, 0, 0, 1, 0), rk(1, 2, 0, 1, 1),
		}},
		{"NodeRank skips a host without ranks (node)", hs(0, 2, 1), 3, Options{MapBy: "node"}, []Rank{
			rk(0, 1, 0, 2, 0), rk(1, 2, 0, 1, 1), rk(2, 1, 1, 2, 0),
		}},
		{"trailing hosts unused", hs(2, 2, 2), 2, Options{}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 0, 1, 2, 0),
		}},
		{"one rank", hs(8), 1, Options{}, []Rank{rk(0, 0, 0, 1, 0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Ranks(tt.hosts, tt.np, tt.opts)
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Ranks(%v, %d, %+v):\n got %v\nwant %v", tt.hosts, tt.np, tt.opts, got, tt.want)
			}
		})
	}
}

func TestPlanErrors(t *testing.T) {
	tests := []struct {
		name      string
		hosts     []hostfile.Host
		np        int
		opts      Options
		wantSlots bool // errors.Is(err, ErrNotEnoughSlots)
		wantMsg   string
	}{
		{"np above slots", hs(2, 2), 5, Options{}, true, "5 ranks requested but only 4 slots on 2 hosts (use --oversubscribe)"},
		{"np above slots (node)", hs(2, 2), 5, Options{MapBy: "node"}, true, "5 ranks requested but only 4 slots on 2 hosts"},
		{"-N above slots", hs(4, 2), 0, Options{NPerNode: 3}, true, "-N 3 but host h1 has 2 slots"},
		{"np above -N total", hs(4, 4), 9, Options{NPerNode: 4}, true, "9 ranks requested but only 8 slots on 2 hosts"},
		{"every host at max_slots", withMax(hs(2, 1), 2, 1), 4, Options{Oversubscribe: true}, true, "4 ranks exceed every host's max_slots"},
		{"no hosts", nil, 1, Options{}, false, "no hosts"},
		{"negative np", hs(2), -1, Options{}, false, "-np -1"},
		{"no slots at all", hs(0, 0), 0, Options{}, false, "no ranks to place"},
		{"one slot, one host", hs(1), 2, Options{}, true, "2 ranks requested but only 1 slot on 1 host (use --oversubscribe)"},
		{"-N above one slot", hs(1), 0, Options{NPerNode: 2}, true, "-N 2 but host h0 has 1 slot (use --oversubscribe)"},
		{"one host without slots", hs(0), 0, Options{}, false, "no ranks to place: 1 host with no slots"},
		{"bad map-by", hs(2), 1, Options{MapBy: "core"}, false, `-map-by "core" is not supported`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Ranks(tt.hosts, tt.np, tt.opts)
			if err == nil {
				t.Fatalf("Plan = %v, want an error containing %q", got, tt.wantMsg)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Plan: %q, want it to contain %q", err, tt.wantMsg)
			}
			if got := errors.Is(err, ErrNotEnoughSlots); got != tt.wantSlots {
				t.Errorf("Plan: %q: errors.Is(err, ErrNotEnoughSlots) = %v, want %v", err, got, tt.wantSlots)
			}
		})
	}
}

// TestPlanPure checks that Plan does not modify its input.
func TestPlanPure(t *testing.T) {
	hosts := withMax(hs(2, 1), 3, 0)
	before := append([]hostfile.Host(nil), hosts...)
	a, err := Ranks(hosts, 5, Options{Oversubscribe: true})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Ranks(hosts, 5, Options{Oversubscribe: true})
	if !reflect.DeepEqual(hosts, before) {
		t.Errorf("Plan changed its hosts: %v, was %v", hosts, before)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("Plan is not deterministic: %v then %v", a, b)
	}
}

// TestPlanRankBy: -rank-by renumbers the placement -map-by made.
func TestPlanRankBy(t *testing.T) {
	hs, err := hostfile.ParseList("a:2,b:2,c:1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		mapBy, rankBy string
		want          []int // host of each rank
	}{
		{"slot", "", []int{0, 0, 1, 1, 2}},
		{"slot", "node", []int{0, 1, 2, 0, 1}},
		{"node", "", []int{0, 1, 2, 0, 1}},
		{"node", "slot", []int{0, 0, 1, 1, 2}},
	} {
		ranks, err := Ranks(hs, 0, Options{MapBy: tt.mapBy, RankBy: tt.rankBy})
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for _, r := range ranks {
			got = append(got, r.Host)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("map-by %s rank-by %q: hosts %v, want %v", tt.mapBy, tt.rankBy, got, tt.want)
		}
		if tt.mapBy == "slot" && tt.rankBy == "node" && (ranks[3].LocalRank != 1 || ranks[3].LocalSize != 2) {
			t.Errorf("rank 3: %+v, want local rank 1 of 2 on a", ranks[3])
		}
	}
}
