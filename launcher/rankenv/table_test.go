package rankenv

import (
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/launcher/plan"
)

func TestPlacementSummary(t *testing.T) {
	ranks := []plan.Rank{{Rank: 0, Host: 0}, {Rank: 1, Host: 1}, {Rank: 2, Host: 0}, {Rank: 3, Host: 1}, {Rank: 4, Host: 0}}
	if got, want := PlacementSummary([]string{"a", "b", "c"}, ranks), "a: 0,2,4; b: 1,3"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestPlacementHeaderCounts: the header counts in the singular when it
// is one rank or one host.
func TestPlacementHeaderCounts(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-H", "a:1"}, "# placement: 1 rank on 1 host (map-by slot), command: prog\n"},
		{[]string{"-H", "a:2"}, "# placement: 2 ranks on 1 host (map-by slot), command: prog\n"},
		{[]string{"-H", "a:1,b:1"}, "# placement: 2 ranks on 2 hosts (map-by slot), command: prog\n"},
	} {
		cfg := parse(t, tc.args...)
		l, err := Plan(cfg.Place)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		WritePlacement(&b, cfg, names(l), l.Ranks)
		if got, _, _ := strings.Cut(b.String(), "RANK"); got != tc.want {
			t.Errorf("%q: header %q, want %q", tc.args, got, tc.want)
		}
	}
}
