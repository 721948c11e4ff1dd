package launcher

import (
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gangway/hostfile"
)

// hs builds hosts h0, h1, ... with the given slots.
func hs(slots ...int) []hostfile.Host {
	out := make([]hostfile.Host, len(slots))
	for i, s := range slots {
		out[i] = hostfile.Host{Name: "h" + itoa(i), Slots: s}
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
		opts  PlanOptions
		want  []Rank
	}{
		{"slot fills each host in order", hs(2, 3, 1), 5, PlanOptions{}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 0, 1, 2, 0),
			rk(2, 1, 0, 3, 1), rk(3, 1, 1, 3, 1), rk(4, 1, 2, 3, 1),
		}},
		{"explicit slot", hs(2, 3, 1), 6, PlanOptions{MapBy: "slot"}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 0, 1, 2, 0),
			rk(2, 1, 0, 3, 1), rk(3, 1, 1, 3, 1), rk(4, 1, 2, 3, 1),
			rk(5, 2, 0, 1, 2),
		}},
		{"node deals round robin over uneven hosts", hs(2, 3, 1), 5, PlanOptions{MapBy: "node"}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 1, 0, 2, 1), rk(2, 2, 0, 1, 2),
			rk(3, 0, 1, 2, 0), rk(4, 1, 1, 2, 1),
		}},
		{"node skips full hosts", hs(1, 3), 4, PlanOptions{MapBy: "node"}, []Rank{
			rk(0, 0, 0, 1, 0), rk(1, 1, 0, 3, 1), rk(2, 1, 1, 3, 1), rk(3, 1, 2, 3, 1),
		}},
		{"np 0 is every slot (slot)", hs(2, 1), 0, PlanOptions{}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 0, 1, 2, 0), rk(2, 1, 0, 1, 1),
		}},
		{"np 0 is every slot (node)", hs(2, 1), 0, PlanOptions{MapBy: "node"}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 1, 0, 1, 1), rk(2, 0, 1, 2, 0),
		}},
		{"-N 1, np 0", hs(2, 2), 0, PlanOptions{NPerNode: 1}, []Rank{
			rk(0, 0, 0, 1, 0), rk(1, 1, 0, 1, 1),
		}},
		{"-N 2 map-by node", hs(4, 2), 0, PlanOptions{NPerNode: 2, MapBy: "node"}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 1, 0, 2, 1), rk(2, 0, 1, 2, 0), rk(3, 1, 1, 2, 1),
		}},
		{"-N 2 with fewer ranks", hs(2, 2), 3, PlanOptions{NPerNode: 2}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 0, 1, 2, 0), rk(2, 1, 0, 1, 1),
		}},
		{"-N above slots with --oversubscribe", hs(2), 0, PlanOptions{NPerNode: 3, Oversubscribe: true}, []Rank{
			rk(0, 0, 0, 3, 0), rk(1, 0, 1, 3, 0), rk(2, 0, 2, 3, 0),
		}},
		{"oversubscribe without max_slots deals the extra round robin", hs(2, 1), 5, PlanOptions{Oversubscribe: true}, []Rank{
			rk(0, 0, 0, 3, 0), rk(1, 0, 1, 3, 0), rk(2, 1, 0, 2, 1),
			rk(3, 0, 2, 3, 0), rk(4, 1, 1, 2, 1),
		}},
		{"oversubscribe respects max_slots", withMax(hs(2, 1), 2), 5, PlanOptions{Oversubscribe: true}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 0, 1, 2, 0),
			rk(2, 1, 0, 3, 1), rk(3, 1, 1, 3, 1), rk(4, 1, 2, 3, 1),
		}},
		{"oversubscribe up to max_slots exactly", withMax(hs(1, 1), 2, 2), 4, PlanOptions{Oversubscribe: true}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 1, 0, 2, 1), rk(2, 0, 1, 2, 0), rk(3, 1, 1, 2, 1),
		}},
		{"oversubscribe map-by node", hs(1, 1), 3, PlanOptions{MapBy: "node", Oversubscribe: true}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 1, 0, 1, 1), rk(2, 0, 1, 2, 0),
		}},
		{"oversubscribe not needed changes nothing", hs(2, 2), 3, PlanOptions{Oversubscribe: true}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 0, 1, 2, 0), rk(2, 1, 0, 1, 1),
		}},
		{"NodeRank skips a host without ranks", hs(1, 0, 1), 2, PlanOptions{}, []Rank{
			rk(0, 0, 0, 1, 0), rk(1, 2, 0, 1, 1),
		}},
		{"NodeRank skips a host without ranks (node)", hs(0, 2, 1), 3, PlanOptions{MapBy: "node"}, []Rank{
			rk(0, 1, 0, 2, 0), rk(1, 2, 0, 1, 1), rk(2, 1, 1, 2, 0),
		}},
		{"trailing hosts unused", hs(2, 2, 2), 2, PlanOptions{}, []Rank{
			rk(0, 0, 0, 2, 0), rk(1, 0, 1, 2, 0),
		}},
		{"one rank", hs(8), 1, PlanOptions{}, []Rank{rk(0, 0, 0, 1, 0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Plan(tt.hosts, tt.np, tt.opts)
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Plan(%v, %d, %+v):\n got %v\nwant %v", tt.hosts, tt.np, tt.opts, got, tt.want)
			}
		})
	}
}

func TestPlanErrors(t *testing.T) {
	tests := []struct {
		name      string
		hosts     []hostfile.Host
		np        int
		opts      PlanOptions
		wantSlots bool // errors.Is(err, ErrNotEnoughSlots)
		wantMsg   string
	}{
		{"np above slots", hs(2, 2), 5, PlanOptions{}, true, "5 ranks requested but only 4 slots on 2 hosts (use --oversubscribe)"},
		{"np above slots (node)", hs(2, 2), 5, PlanOptions{MapBy: "node"}, true, "5 ranks requested but only 4 slots on 2 hosts"},
		{"-N above slots", hs(4, 2), 0, PlanOptions{NPerNode: 3}, true, "-N 3 but host h1 has 2 slots"},
		{"np above -N total", hs(4, 4), 9, PlanOptions{NPerNode: 4}, true, "9 ranks requested but only 8 slots on 2 hosts"},
		{"every host at max_slots", withMax(hs(2, 1), 2, 1), 4, PlanOptions{Oversubscribe: true}, true, "4 ranks exceed every host's max_slots"},
		{"no hosts", nil, 1, PlanOptions{}, false, "no hosts"},
		{"negative np", hs(2), -1, PlanOptions{}, false, "-np -1"},
		{"no slots at all", hs(0, 0), 0, PlanOptions{}, false, "no ranks to place"},
		{"bad map-by", hs(2), 1, PlanOptions{MapBy: "core"}, false, `-map-by "core" is not supported`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Plan(tt.hosts, tt.np, tt.opts)
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
	a, err := Plan(hosts, 5, PlanOptions{Oversubscribe: true})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Plan(hosts, 5, PlanOptions{Oversubscribe: true})
	if !reflect.DeepEqual(hosts, before) {
		t.Errorf("Plan changed its hosts: %v, was %v", hosts, before)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("Plan is not deterministic: %v then %v", a, b)
	}
}

func TestParseRankSet(t *testing.T) {
	tests := []struct {
		in   string
		want []int // the members among 0..9
	}{
		{"0", []int{0}},
		{"3", []int{3}},
		{"0,2,4-7", []int{0, 2, 4, 5, 6, 7}},
		{" 1 , 3-4 ", []int{1, 3, 4}},
		{"5-5", []int{5}},
		{"8-100", []int{8, 9}},
		{"2,2,1-2", []int{1, 2}},
		{"12", nil},
	}
	for _, tt := range tests {
		rs, err := ParseRankSet(tt.in)
		if err != nil {
			t.Errorf("ParseRankSet(%q): %v", tt.in, err)
			continue
		}
		if rs.All() {
			t.Errorf("ParseRankSet(%q).All() = true", tt.in)
		}
		var got []int
		for r := range 10 {
			if rs.Has(r) {
				got = append(got, r)
			}
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseRankSet(%q) has %v of 0..9, want %v", tt.in, got, tt.want)
		}
		if rs.Has(-1) {
			t.Errorf("ParseRankSet(%q).Has(-1)", tt.in)
		}
	}
}

func TestParseRankSetErrors(t *testing.T) {
	tests := []struct{ in, wantMsg string }{
		{"", `bad rank ""`},
		{"a", `bad rank "a"`},
		{"-1", `bad rank "-1"`},
		{"1,", `bad rank ""`},
		{"1,,2", `bad rank ""`},
		{"3-1", `bad rank range "3-1"`},
		{"1-", `bad rank range "1-"`},
		{"1-2-3", `bad rank range "1-2-3"`},
		{"1-x", `bad rank range "1-x"`},
		{"1.5", `bad rank "1.5"`},
		{"99999999999999999999", `bad rank`},
	}
	for _, tt := range tests {
		_, err := ParseRankSet(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.wantMsg) {
			t.Errorf("ParseRankSet(%q) = %v, want an error containing %q", tt.in, err, tt.wantMsg)
		}
	}
}

func TestRankSetZeroIsAll(t *testing.T) {
	var rs RankSet
	if !rs.All() {
		t.Error("zero RankSet: All() = false")
	}
	for _, r := range []int{0, 1, 1000} {
		if !rs.Has(r) {
			t.Errorf("zero RankSet: Has(%d) = false", r)
		}
	}
}

func TestRoutePeers(t *testing.T) {
	names := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "h" + strconv.Itoa(i)
		}
		return out
	}
	small := names(17)
	if got := routePeers(small, 3); len(got) != 16 || slices.Contains(got, "h3") {
		t.Fatalf("17 hosts: want every other host, got %v", got)
	}
	big := names(1024)
	for _, i := range []int{0, 1, 500, 1023} {
		got := routePeers(big, i)
		if len(got) != maxRoutePeers {
			t.Fatalf("host %d: %d peers, want %d", i, len(got), maxRoutePeers)
		}
		for _, want := range []string{"h0", big[(i+1)%1024], big[(i+1023)%1024]} {
			if want != big[i] && !slices.Contains(got, want) {
				t.Errorf("host %d: %v lacks %s", i, got, want)
			}
		}
		if slices.Contains(got, big[i]) {
			t.Errorf("host %d routes to itself", i)
		}
		seen := map[string]bool{}
		for _, p := range got {
			if seen[p] {
				t.Errorf("host %d: %s twice", i, p)
			}
			seen[p] = true
		}
		if !slices.Equal(got, routePeers(big, i)) {
			t.Errorf("host %d: not deterministic", i)
		}
	}
}

// TestUniverseSize: -usize as PMI tells it, Hydra's meanings: a number is
// itself, SYSTEM the slots of the hosts that run ranks, INFINITE and no
// -usize -1 (unknown).
func TestUniverseSize(t *testing.T) {
	slots := []int{3, 5, 7}
	onFirst := []Rank{{Rank: 0, Host: 0}, {Rank: 1, Host: 0}}
	onTwo := []Rank{{Rank: 0, Host: 0}, {Rank: 1, Host: 0}, {Rank: 2, Host: 0}, {Rank: 3, Host: 1}}
	for _, tc := range []struct {
		name  string
		u     int
		ranks []Rank
		want  int
	}{
		{"not given", 0, onTwo, -1},
		{"INFINITE", UniverseInfinite, onTwo, -1},
		{"a number", 12, onTwo, 12},
		{"SYSTEM, ranks on one host", UniverseSystem, onFirst, 3},
		{"SYSTEM, ranks on two hosts", UniverseSystem, onTwo, 8},
	} {
		if got := universeSize(tc.u, slots, tc.ranks); got != tc.want {
			t.Errorf("%s: universeSize(%d) = %d, want %d", tc.name, tc.u, got, tc.want)
		}
	}
}
