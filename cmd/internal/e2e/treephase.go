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

// NoTree marks a test none of whose launches can go through the tree,
// why says how: "one host" (a tree of any width reaches a single host
// flat), "local ranks only", "--transport ssh" (it starts every agent
// itself), "mpirun launches the ranks" (--mpi=openmpi). The second run
// would run the test exactly as the first did; NoTree skips it there,
// and only there.
func NoTree(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(TreePhaseEnv) != "" {
		t.Skip(why + ": no launch of this test goes through the tree, so the tree phase (" + TreePhaseEnv + " set) would run it as the first run did")
	}
}
