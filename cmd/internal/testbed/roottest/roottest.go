// Package roottest holds RequireRoot, kept apart from package testbed so
// that non-test binaries importing testbed (`make bench`) do not link
// package testing.
package roottest

import (
	"os"
	"testing"

	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
)

// EnvRequire, set to "1" (CI does), turns RequireRoot's skip into a failure.
const EnvRequire = "GANGWAY_REQUIRE_ROOT_TESTS"

// RequireRoot skips the test unless network-namespace beds can be built
// here (root, and `ip netns` usable); with GANGWAY_REQUIRE_ROOT_TESTS=1 it
// fails the test instead, so a skip in CI cannot hide a broken setup.
func RequireRoot(t testing.TB) {
	t.Helper()
	err := testbed.Usable()
	if err == nil {
		return
	}
	msg := "needs root to create network namespaces (" + err.Error() + ")"
	if os.Getenv(EnvRequire) == "1" {
		t.Fatal(msg + "; failing instead of skipping because " + EnvRequire + "=1")
	}
	t.Skip(msg + "; run as root, or set " + EnvRequire + "=1 to make this skip a failure (CI does)")
}
