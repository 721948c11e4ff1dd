package nettest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/launcher"
)

// inProcLaunch is one launcher.Main run in this process.
type inProcLaunch struct {
	code           int
	stdout, stderr syncBuffer
	took           time.Duration
}

func (l *inProcLaunch) String() string {
	return fmt.Sprintf("exit code %d after %v\nstdout:\n%s\nstderr:\n%s", l.code, l.took.Round(time.Millisecond), e2e.Tail(l.stdout.String(), 4000), e2e.Tail(l.stderr.String(), 6000))
}

// launchInProc runs launcher.Main in this process against c's agents
// (e2e.StartLocal: sshd.Servers in this process, each on its own
// loopback address, ranks started as this process's children) with args
// after the connection options and -H, and returns when it does. At
// jobTimeout its context is cancelled, which stops the job, and the test
// fails.
func launchInProc(t *testing.T, c *e2e.Cluster, slots int, args ...string) *inProcLaunch {
	t.Helper()
	return launchInProcArgs(t, append(append(c.SSHFlags(), "-H", c.HostList(slots)), args...)...)
}

// launchInProcArgs runs the launcher in-process with exactly args.
func launchInProcArgs(t *testing.T, full ...string) *inProcLaunch {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), jobTimeout)
	defer cancel()
	cwd, _ := os.Getwd()
	l := &inProcLaunch{}
	d := launcher.Deps{
		Log:    zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named("launcher"),
		Stdout: &l.stdout, Stderr: &l.stderr,
		Version: "nettest", Cwd: cwd,
	}
	t0 := time.Now()
	l.code = launcher.Main(ctx, full, d, nil)
	l.took = time.Since(t0)
	if ctx.Err() != nil && t.Context().Err() == nil {
		t.Fatalf("launcher still running after %v; cancelled.\n%v", jobTimeout, l)
	}
	return l
}
