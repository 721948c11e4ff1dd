package sshd

import (
	"os"
	"testing"

	"github.com/gangway-hpc/gangway/agent/proc"
)

// TestMain lets the test binary be the ranks' supervisor, as cmd/agent's
// binary is: in-process agents (agenttest) then run ranks under it.
func TestMain(m *testing.M) {
	if code, ok := proc.Supervise(os.Args); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}
