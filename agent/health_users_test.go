package agent_test

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gangway-hpc/gangway/agent"
	"github.com/gangway-hpc/gangway/agent/account"
	"github.com/gangway-hpc/gangway/agent/agenttest"
	"github.com/gangway-hpc/gangway/agent/wire"
)

// TestHealthCheckRunsAsUser: a root agent runs the site's health check
// for a login of another user as that user (uid, gid), from the user's
// home, with the user's identity in its environment and GANGWAY_HOST.
func TestHealthCheckRunsAsUser(t *testing.T) {
	agenttest.RequireRoot(t)
	t.Parallel()
	u := agenttest.NewUser(t, "")
	acct, err := account.Lookup(u.Name)
	if err != nil {
		t.Fatal(err)
	}
	a := &agent.Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t), BaseEnv: []string{"PATH=/usr/bin:/bin"}}
	ours, theirs := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- a.ServeLogin(t.Context(), theirs, account.Login{Account: acct}) }()
	t.Cleanup(func() {
		ours.Close()
		<-done
	})
	c := wire.NewConn(ours)
	if err := c.Send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "asuser", Host: "node3",
		Health: &wire.HealthRequest{Command: `echo "$(id -u) $(id -g) $(pwd) $USER $HOME $GANGWAY_HOST"; exit 2`, Timeout: 10 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	m, err := c.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var f wire.Facts
	if err := m.Decode(&f); err != nil || f.Health == nil {
		t.Fatalf("%s %s: %v", m.Kind, m.Payload, err)
	}
	var site wire.Check
	for _, ch := range f.Health.Checks {
		if ch.Name == wire.CheckSite {
			site = ch
		}
	}
	uid, gid := strconv.Itoa(int(u.Uid)), strconv.Itoa(int(u.Gid))
	want := strings.Join([]string{uid, gid, u.Home, u.Name, u.Home, "node3"}, " ") + "\n"
	if site.Status != wire.CheckFail || site.Output != want || !strings.Contains(site.Detail, "status 2") {
		t.Errorf("site check %+v, want output %q", site, want)
	}
}
