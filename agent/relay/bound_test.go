package relay

import (
	"testing"
	"time"
)

// TestStallBound: a write to a child may stall for StallTimeout, or for
// longer than its keepalives can take to find it silent, so that a child
// behind a dead link is cut as silent, not as a stalled reader.
func TestStallBound(t *testing.T) {
	for _, tc := range []struct{ interval, silence, want time.Duration }{
		{time.Second, 2 * time.Second, StallTimeout},
		{5 * time.Second, 15 * time.Second, 25 * time.Second},
		{10 * time.Second, 90 * time.Second, 110 * time.Second},
	} {
		got := stallBound(tc.interval, tc.silence)
		if got != tc.want {
			t.Errorf("stallBound(%v, %v) = %v, want %v", tc.interval, tc.silence, got, tc.want)
		}
		if worst := tc.interval + tc.silence; got <= worst {
			t.Errorf("stallBound(%v, %v) = %v, not past the keepalives' worst case %v", tc.interval, tc.silence, got, worst)
		}
	}
}
