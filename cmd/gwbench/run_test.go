package main

import (
	"slices"
	"strings"
	"testing"
)

// TestScaleFlags: -scale-counts and -scale-widths take comma-separated
// integers in their ranges and name the first one that is not.
func TestScaleFlags(t *testing.T) {
	for _, tc := range []struct {
		args           []string
		counts, widths []int
		err            string
	}{
		{nil, nil, nil, ""},
		{[]string{"-scale-counts", "1024, 10000", "-scale-widths", "32,0"}, []int{1024, 10000}, []int{32, 0}, ""},
		{[]string{"-scale-counts", "0"}, nil, nil, `-scale-counts: "0" is not a count from 1 to 20000`},
		{[]string{"-scale-counts", "256,many"}, nil, nil, `-scale-counts: "many" is not a count`},
		{[]string{"-scale-widths", "1"}, nil, nil, `-scale-widths: "1" is not 0 (flat) or a tree width from 2 to 1024`},
		{[]string{"-scale-widths", "4,2048"}, nil, nil, `"2048" is not 0 (flat)`},
	} {
		var stderr strings.Builder
		o, err := parseFlags(tc.args, &stderr)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.err == "" && (!slices.Equal(o.scaleCounts, tc.counts) || !slices.Equal(o.scaleWidths, tc.widths)):
			t.Errorf("%q: counts %v widths %v, want %v %v", tc.args, o.scaleCounts, o.scaleWidths, tc.counts, tc.widths)
		}
	}
}
