package bench

import (
	"math"
	"testing"
	"time"
)

// TestGoodput: successful attempts count whole, failed ones up to their
// last benchmark line, ones without any line not at all; backoffs between
// attempts count against it.
func TestGoodput(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ptr := func(s float64) *time.Time { v := at(s); return &v }
	ok := func(start, end float64) Attempt { return Attempt{Start: at(start), End: at(end)} }
	failed := func(start, end float64, progress *time.Time) Attempt {
		return Attempt{Start: at(start), End: at(end), Cause: "rank 1 exited with code 3", ExitCode: 3, LastProgress: progress}
	}
	for _, tc := range []struct {
		name     string
		attempts []Attempt
		want     float64
		ok       bool
	}{
		{"none", nil, 0, false},
		{"one success", []Attempt{ok(0, 10)}, 1, true},
		{"one failure, no progress", []Attempt{failed(0, 10, nil)}, 0, true},
		{"failure after progress, backoff, success", []Attempt{failed(0, 10, ptr(8)), ok(12, 20)}, (8.0 + 8) / 20, true},
		{"progress line after the end is clipped", []Attempt{failed(0, 10, ptr(11)), ok(10, 20)}, 1, true},
		{"progress before the start does not count", []Attempt{failed(5, 10, ptr(4)), ok(10, 20)}, 10.0 / 15, true},
		{"every attempt failed", []Attempt{failed(0, 10, ptr(5)), failed(10, 20, nil), failed(20, 40, ptr(30))}, 15.0 / 40, true},
		{"no wall time", []Attempt{ok(3, 3)}, 0, false},
	} {
		got, gotOK := Goodput(tc.attempts)
		if gotOK != tc.ok || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: Goodput = %v, %v; want %v, %v", tc.name, got, gotOK, tc.want, tc.ok)
		}
	}
}
