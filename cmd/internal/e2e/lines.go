package e2e

import (
	"strconv"
	"strings"
)

// RankLines returns the launcher's stdout lines "[R] text" (its -l tags)
// grouped by rank, in order; other lines are left out.
func RankLines(out string) map[int][]string {
	m := map[int][]string{}
	for line := range strings.Lines(out) {
		line = strings.TrimSuffix(line, "\n")
		rest, ok := strings.CutPrefix(line, "[")
		if !ok {
			continue
		}
		r, text, ok := strings.Cut(rest, "] ")
		n, err := strconv.Atoi(r)
		if !ok || err != nil {
			continue
		}
		m[n] = append(m[n], text)
	}
	return m
}

// Head returns the first n bytes of s, marked as cut when it was longer:
// where a launcher's stderr says what went wrong first.
func Head(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// LineWith returns the first line of s containing sub, without its
// newline, or "".
func LineWith(s, sub string) string {
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			return strings.TrimSuffix(line, "\n")
		}
	}
	return ""
}

// Tail returns the last n bytes of s, marked as cut when it was longer.
func Tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
