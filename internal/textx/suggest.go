// Package textx holds small text helpers the launcher, the agent and the
// leaf parsers share: "did you mean" suggestions, POSIX shell word
// splitting, OpenSSH's patterns (MatchPattern), rank output's line ends
// (LineEnd, LastLineEnd), and clipping untrusted strings for log lines.
package textx

import "strings"

// Distance is the Levenshtein edit distance between a and b, in bytes.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Suggest is the candidate closest to s (ignoring case), "" when none is
// close: at most 1 edit for a name of up to 2 bytes, 2 up to 8, else 3.
// Ties go to the candidate closer with case counted, then to the one
// closer in length, then to the earlier one. A candidate that s is a prefix of (or
// that is a prefix of s) also counts as close when it is at least 4 bytes
// long ("-oversub" for "-oversubscribe").
func Suggest(s string, candidates []string) string {
	if s == "" || len(s) > 64 {
		return ""
	}
	ls := strings.ToLower(s)
	limit := 3
	switch {
	case len(s) <= 2:
		limit = 1
	case len(s) <= 8:
		limit = 2
	}
	best, bestD := "", [3]int{limit + 1}
	for _, c := range candidates {
		lc := strings.ToLower(c)
		d := [3]int{Distance(ls, lc), Distance(s, c), abs(len(s) - len(c))}
		if less(d, bestD) {
			best, bestD = c, d
		}
	}
	if best != "" {
		return best
	}
	for _, c := range candidates {
		lc := strings.ToLower(c)
		if len(ls) >= 4 && len(lc) >= 4 && (strings.HasPrefix(lc, ls) || strings.HasPrefix(ls, lc)) {
			return c
		}
	}
	return ""
}

func less(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
