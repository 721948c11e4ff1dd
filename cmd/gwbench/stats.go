package main

import (
	"fmt"
	"math"
	"slices"
)

// Summary is the median, minimum and maximum of a sample.
type Summary struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// Summarize returns the summary of v (the zero Summary when v is empty).
// The median of an even-sized sample is the mean of the two middle values.
func Summarize(v []float64) Summary {
	if len(v) == 0 {
		return Summary{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return Summary{N: n, Median: med, Min: s[0], Max: s[n-1]}
}

// Ratio is ours/theirs, or 0 (no ratio) when either is missing or zero.
func Ratio(ours, theirs float64) float64 {
	if ours <= 0 || theirs <= 0 || math.IsNaN(ours) || math.IsNaN(theirs) {
		return 0
	}
	return ours / theirs
}

// fmtNum prints a value with a precision suited to its size.
func fmtNum(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "-"
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 100:
		return fmt.Sprintf("%.1f", v)
	case a >= 10:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// fmtRatio prints a ratio as "0.123x", "-" when there is none.
func fmtRatio(r float64) string {
	if r <= 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		return "-"
	}
	if r >= 10 {
		return fmt.Sprintf("%.1fx", r)
	}
	return fmt.Sprintf("%.3fx", r)
}
