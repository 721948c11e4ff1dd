package textx

import (
	"strings"
	"testing"
)

func TestMatchPattern(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"LANG", "LANG", true},
		{"LANG", "LANGUAGE", false},
		{"LC_*", "LC_ALL", true},
		{"LC_*", "LC_", true},
		{"LC_*", "XLC_ALL", false},
		{"*", "", true},
		{"?", "", false},
		{"OMP_NUM_THREAD?", "OMP_NUM_THREADS", true},
		{"a*b*c", "aXXbYYc", true},
		{"a*b*c", "aXXbYY", false},
		{"gwtestuser*", "gwtestuser123", true},
		{"*x", strings.Repeat("a", 10000), false},
		{"node??", "node1", false}, // exactly one byte each
		{"node??", "node12", true},
		{"node2", "NODE2", false}, // case and all
		{"*", "*0", true},         // a star in the name is a byte
		{"*a*a*a*a*a*a*a*a*a*a*c", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaab", false},
	} {
		if got := MatchPattern(tc.pattern, tc.s); got != tc.want {
			t.Errorf("MatchPattern(%q, %.20q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

// matchRef is match_pattern written plainly (recursive), for
// FuzzMatchPattern to hold MatchPattern to.
func matchRef(p, s string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			for i := 0; i <= len(s); i++ {
				if matchRef(p[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
		default:
			if s == "" || s[0] != p[0] {
				return false
			}
		}
		p, s = p[1:], s[1:]
	}
	return s == ""
}

// FuzzMatchPattern: MatchPattern agrees with the plain recursive matcher.
func FuzzMatchPattern(f *testing.F) {
	for _, s := range [][2]string{{"gpu-*", "gpu-17"}, {"node??", "node1"}, {"*a*b", "xaybzb"}, {"**", ""}, {"a*", "b"}, {"*", "*0"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, p, s string) {
		if len(p) > 12 || len(s) > 24 {
			return // the reference is exponential in stars
		}
		if got, want := MatchPattern(p, s), matchRef(p, s); got != want {
			t.Fatalf("MatchPattern(%q, %q) = %v, want %v", p, s, got, want)
		}
	})
}
