// Package slurmtest holds the test-only helpers of slurmbed, kept apart so
// that the bench binary, which imports slurmbed, does not link package
// testing.
package slurmtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/cmd/internal/slurmbed"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed/roottest"
)

// Require skips t unless a Slurm bed can be built here. Without root it
// skips (roottest.RequireRoot: a failure under GANGWAY_REQUIRE_ROOT_TESTS=1);
// as root without Slurm's packages it skips too, and fails under
// GANGWAY_REQUIRE_ROOT_TESTS=1, where CI has installed them (make deps).
func Require(t testing.TB) {
	t.Helper()
	roottest.RequireRoot(t)
	err := slurmbed.Installed()
	if err == nil {
		return
	}
	if os.Getenv(roottest.EnvRequire) == "1" {
		t.Fatal(err.Error() + "; failing instead of skipping because " + roottest.EnvRequire + "=1")
	}
	t.Skip(err.Error())
}

// Shared is one bed for every test of a test process, built by the first
// Get and removed by Close (call it from TestMain after m.Run).
type Shared struct {
	Options slurmbed.Options
	once    sync.Once
	bed     *slurmbed.Bed
	err     error
}

// Get returns the shared bed, building it the first time; it skips or
// fails t as Require does, and fails t if the bed cannot be built.
func (s *Shared) Get(t testing.TB) *slurmbed.Bed {
	t.Helper()
	Require(t)
	s.once.Do(func() {
		o := s.Options
		// Not t.Logf: the bed outlives this test, and Close logs too.
		o.Logf = func(format string, args ...any) {
			if testing.Verbose() {
				fmt.Fprintf(os.Stderr, format+"\n", args...)
			}
		}
		t0 := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		s.bed, s.err = slurmbed.New(ctx, o)
		if s.err == nil {
			t.Logf("slurm bed %s: %d nodes up in %v", o.Prefix, o.Nodes, time.Since(t0).Round(time.Millisecond))
		}
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.bed
}

// Close removes the bed if one was built, and reports what Close found.
func (s *Shared) Close() error {
	if s.bed == nil {
		return nil
	}
	return s.bed.Close()
}
