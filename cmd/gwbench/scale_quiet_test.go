package main

import (
	"strings"
	"testing"
)

// TestParseQuietRun: the latest of size start lines, whatever else the
// output holds (a rank's tag before each line); a missing, extra or
// malformed line fails the run.
func TestParseQuietRun(t *testing.T) {
	for _, tc := range []struct {
		out  string
		size int
		want int64
		err  string
	}{
		{"gwbench quiet 100\n[1] gwbench quiet 300\nother\ngwbench quiet 200\n", 3, 300, ""},
		{"gwbench quiet 100\n", 2, 0, "1 of 2 ranks"},
		{"gwbench quiet 100\ngwbench quiet 5\ngwbench quiet 7\n", 2, 0, "3 of 2 ranks"},
		{"gwbench quiet x\n", 1, 0, "malformed line"},
		{"gwbench quiet -4\n", 1, 0, "malformed line"},
		{"", 0, 0, ""},
	} {
		got, err := parseQuietRun(tc.out, tc.size)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %d, %v; want %q", tc.out, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %d, %v; want %d", tc.out, got, err, tc.want)
		}
	}
}

func FuzzParseQuietRun(f *testing.F) {
	f.Add("gwbench quiet 100\n[1] gwbench quiet 300\n", 2)
	f.Add("gwbench quiet \n", 1)
	f.Add("gwbench quiet 99999999999999999999\n", 1)
	f.Fuzz(func(t *testing.T, out string, size int) {
		last, err := parseQuietRun(out, size)
		if err == nil && size > 0 && last <= 0 {
			t.Fatalf("%q: latest start %d", out, last)
		}
	})
}
