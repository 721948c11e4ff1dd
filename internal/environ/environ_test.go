package environ

import (
	"slices"
	"testing"
)

func TestMerge(t *testing.T) {
	for _, tc := range []struct {
		lists [][]string
		want  []string
	}{
		{nil, []string{}},
		{[][]string{{"B=1", "A=2"}}, []string{"A=2", "B=1"}},
		// The last list wins, and within a list the last entry.
		{[][]string{{"A=base", "B=base"}, {"A=mid"}, {"A=top", "A=last"}}, []string{"A=last", "B=base"}},
		// Empty values stay; entries without "=" go.
		{[][]string{{"A=", "JUNK"}, nil, {"C=x=y"}}, []string{"A=", "C=x=y"}},
	} {
		if got := Merge(tc.lists...); !slices.Equal(got, tc.want) {
			t.Errorf("Merge(%q) = %q, want %q", tc.lists, got, tc.want)
		}
	}
}
