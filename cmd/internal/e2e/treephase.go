package e2e

import (
	"os"
	"testing"
)

// TreePhaseEnv forces the agent tree in every launch that does not give
// --tree-width: `make test` runs the end-to-end packages a second time
// with GANGWAY_TREE_WIDTH=1 (every host behind the one before it), so
// that every test's launches go through relays.
const TreePhaseEnv = "GANGWAY_TREE_WIDTH"

// OneHost marks a test whose launches reach one host or none (or only
// with --transport ssh, which starts every agent itself): a tree of any
// width reaches a single host flat, so the second run would run the test
// exactly as the first did. It skips the test there, and only there.
func OneHost(t testing.TB) {
	t.Helper()
	if os.Getenv(TreePhaseEnv) != "" {
		t.Skip("one host: a tree reaches it flat, so the tree phase runs it as the first run did (" + TreePhaseEnv + " is set)")
	}
}
