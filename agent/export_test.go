package agent

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/account"
	"github.com/gangway-hpc/gangway/agent/wire"
)

// RunAsTracer runs argv as a dump runs gdb for the ranks of user name
// under Yama's ptrace_scope scope (the account's credential, the
// tracer's capabilities, environment and bounds) and returns its output.
func RunAsTracer(ctx context.Context, name string, scope int, argv ...string) (string, error) {
	a, err := account.Lookup(name)
	if err != nil {
		return "", err
	}
	t := tracerFor(argv[0], a.Credential(), scope, zap.NewNop())
	if t.refuse != "" {
		return "", fmt.Errorf("refused: %s", t.refuse)
	}
	out := &headWriter{max: gdbOutput}
	cmd := t.command(ctx, out, argv[1:]...)
	if err := cmd.Start(); err != nil {
		return "", err
	}
	err = cmd.Wait()
	return string(out.buf), err
}

// bindCPUs binds one rank as a job's binder does (cpuBinder.bind).
func (a *Agent) bindCPUs(mode string, r wire.RankSpec, f wire.Facts, allowed []int) ([]int, error) {
	return a.binder(allowed).bind(mode, r, f)
}
