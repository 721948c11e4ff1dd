package rankenv

import (
	"slices"
	"strconv"
	"testing"
)

func TestRoutePeers(t *testing.T) {
	names := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "h" + strconv.Itoa(i)
		}
		return out
	}
	small := names(17)
	if got := RoutePeers(small, 3); len(got) != 16 || slices.Contains(got, "h3") {
		t.Fatalf("17 hosts: want every other host, got %v", got)
	}
	big := names(1024)
	for _, i := range []int{0, 1, 500, 1023} {
		got := RoutePeers(big, i)
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
		if !slices.Equal(got, RoutePeers(big, i)) {
			t.Errorf("host %d: not deterministic", i)
		}
	}
}
