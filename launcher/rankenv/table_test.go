package rankenv

import (
	"testing"

	"gangway/launcher/plan"
)

func TestPlacementSummary(t *testing.T) {
	ranks := []plan.Rank{{Rank: 0, Host: 0}, {Rank: 1, Host: 1}, {Rank: 2, Host: 0}, {Rank: 3, Host: 1}, {Rank: 4, Host: 0}}
	if got, want := PlacementSummary([]string{"a", "b", "c"}, ranks), "a: 0,2,4; b: 1,3"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
