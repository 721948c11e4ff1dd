package proc

import (
	"slices"
	"testing"
)

// TestSplitEnv: the common part and each rest put back together give each
// environment's set of variables, and the common part is what all share.
func TestSplitEnv(t *testing.T) {
	for _, tc := range []struct {
		name   string
		envs   [][]string
		common []string
	}{
		{"none", nil, nil},
		{"one", [][]string{{"A=1", "B=2"}}, nil},
		{"ranks", [][]string{{"A=1", "RANK=0", "Z=9"}, {"A=1", "RANK=1", "Z=9"}, {"RANK=2", "Z=9", "A=1"}}, []string{"A=1", "Z=9"}},
		{"nothing shared", [][]string{{"A=1"}, {"A=2"}}, nil},
		{"duplicates", [][]string{{"A=1", "A=1"}, {"A=1"}}, []string{"A=1"}},
		{"empty env", [][]string{{}, {"A=1"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			common, rest := splitEnv(tc.envs)
			if !slices.Equal(common, tc.common) {
				t.Errorf("common %q, want %q", common, tc.common)
			}
			if len(rest) != len(tc.envs) {
				t.Fatalf("%d rests for %d envs", len(rest), len(tc.envs))
			}
			for i, env := range tc.envs {
				got := append(slices.Clone(common), rest[i]...)
				if len(tc.envs) < 2 {
					got = rest[i]
				}
				a, b := slices.Clone(got), slices.Clone(env)
				slices.Sort(a)
				slices.Sort(b)
				if !slices.Equal(slices.Compact(a), slices.Compact(b)) {
					t.Errorf("env %d: %q + %q, want %q", i, common, rest[i], env)
				}
			}
		})
	}
}

func TestDedupEnv(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{nil, nil},
		{[]string{"A=1", "B=2"}, []string{"A=1", "B=2"}},
		{[]string{"A=1", "B=2", "A=3"}, []string{"B=2", "A=3"}},
		{[]string{"A", "A=1"}, []string{"A=1"}},
	} {
		if got := dedupEnv(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("dedupEnv(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
