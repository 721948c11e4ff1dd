package engine

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/launcher/transport"
)

// TestNotReached: the hosts a spare may take the place of are those the
// dial phase's wait ended without (its start timeout or its unreachable
// grace), and only when none of the launch's failed hosts failed for good.
func TestNotReached(t *testing.T) {
	refused := &hostError{Host: "gpu02", Err: transport.Unreachable(errors.New("gpu02:22122: connection refused"))}
	slow := &hostError{Host: "gpu03", Err: errors.New("gpu03:22122: ssh handshake failed: timeout")}
	badKey := &hostError{Host: "gpu04", Err: transport.Permanent(errors.New("gpu04:22122: host key mismatch"))}
	for _, c := range []struct {
		name string
		err  error
		want []string
	}{
		{"unreachable grace", fmt.Errorf("%w: %w", errUnreachableGrace{10 * time.Second}, hostErrors{refused}), []string{"gpu02"}},
		{"start timeout", fmt.Errorf("%w: %w", errStartTimeout{time.Minute}, hostErrors{refused, slow}), []string{"gpu02", "gpu03"}},
		{"start timeout, a host key among them", fmt.Errorf("%w: %w", errStartTimeout{time.Minute}, hostErrors{refused, badKey}), nil},
		{"failed for good", fmt.Errorf("cannot reach every host: %w", hostErrors{badKey}), nil},
		{"the launcher's own end", errors.New("interrupted"), nil},
		{"none", nil, nil},
	} {
		var got []string
		for _, e := range notReached(c.err) {
			got = append(got, e.Host)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	// The wait's own words are unchanged.
	err := fmt.Errorf("%w: %w", errStartTimeout{time.Minute}, hostErrors{refused})
	if want := "hosts not reachable within --start-timeout 1m0s: host gpu02: gpu02:22122: connection refused"; err.Error() != want {
		t.Errorf("%q, want %q", err, want)
	}
}
