package testbed

import (
	"context"

	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
)

// StartSSHDWithBashrc starts sshd without the clean-shell wrapper, as the
// control in tests and for timing comparisons.
func (b *Bed) StartSSHDWithBashrc(ctx context.Context, host, port int, keys sshtest.Keys) (*Proc, error) {
	return b.startSSHD(ctx, host, port, keys, nil)
}
