package e2e_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gangway-hpc/gangway/agent"
	"github.com/gangway-hpc/gangway/agent/agenttest"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/launcher"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// TestStartJobTimeoutNamed: while the launcher waits for a host that
// comes up late, an agent with a short --start-job-timeout closes the
// session the launcher already has with it. The launcher's next send to
// that agent fails with a bare EOF while the agent's reason waits
// unread; the launcher reports the reason, naming the limit, and exits 1.
func TestStartJobTimeoutNamed(t *testing.T) {
	t.Parallel()
	c := e2e.StartLocal(t, 2, agenttest.WithAgent(func(i int, a *agent.Agent) {
		if i == 0 {
			a.StartJobTimeout = 300 * time.Millisecond
		}
	}))
	ssh, err := transport.New(transport.Options{Kind: transport.Agent, Identity: c.Keys.ClientKey, KnownHosts: c.KnownHosts}, nil, false, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	late := c.Hosts[1]
	var firstDial atomic.Pointer[time.Time]
	remote := transport.DialerFunc(func(ctx context.Context, h hostfile.Host) (io.ReadWriteCloser, string, error) {
		now := time.Now()
		firstDial.CompareAndSwap(nil, &now)
		if h.Name == late.Addr && now.Sub(*firstDial.Load()) < 2*time.Second {
			return nil, "", errors.New("not up yet")
		}
		return ssh.Dial(ctx, h)
	})
	_, stderr, code := e2e.Run(t, launcher.Deps{Remote: remote}, "-np", "2", "-H", c.HostList(1), "--start-timeout", "30", "/bin/true")
	want := "host " + c.Hosts[0].Addr + ": no job within 300ms of the session's start (the agent's --start-job-timeout)"
	if code != 1 || !strings.Contains(stderr, want) {
		t.Fatalf("exit %d, want 1 with %q:\n%s", code, want, stderr)
	}
	t.Logf("launcher: %s", stderr)
}
