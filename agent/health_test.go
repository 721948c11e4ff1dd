package agent

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// TestFactsCarryHealth: a Hello that asks for health gets it in the
// facts: the site command ran with GANGWAY_HOST and the ranks' base
// environment, TMPDIR is the agent's base TMPDIR, and without
// nvidia-smi the GPU checks say "not checked". Without a request the
// facts carry no health.
func TestFactsCarryHealth(t *testing.T) {
	tmp := t.TempDir()
	noSMI := func(context.Context, ...string) ([]byte, error) { return nil, exec.ErrNotFound }
	a := &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t), BaseEnv: []string{"TMPDIR=" + tmp, "SITE=lab", "PATH=/usr/bin:/bin"}}
	a.Facts.NvidiaSMI = noSMI
	c := serve(t, a)
	c.send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "health", Host: "node7",
		Health: &wire.HealthRequest{Command: `echo "$GANGWAY_HOST $SITE $TMPDIR"; exit 4`, Timeout: 10 * time.Second}})
	var f wire.Facts
	c.recv(wire.KindFacts, &f)
	if f.Health == nil {
		t.Fatal("no health in the facts")
	}
	if err := f.Health.Validate(); err != nil {
		t.Fatal(err)
	}
	got := map[string]wire.Check{}
	for _, ch := range f.Health.Checks {
		got[ch.Name] = ch
	}
	if ch := got[wire.CheckSite]; ch.Status != wire.CheckFail || ch.Output != "node7 lab "+tmp+"\n" || !strings.Contains(ch.Detail, "status 4") {
		t.Errorf("site check: %+v", ch)
	}
	if ch := got[wire.CheckTmpDir]; ch.Status != wire.CheckOK || !strings.Contains(ch.Detail, tmp) {
		t.Errorf("tmpdir check: %+v", ch)
	}
	if ch := got[wire.CheckGPUECC]; ch.Status != wire.CheckNotChecked || f.Health.GPUs != -1 {
		t.Errorf("without nvidia-smi: %d GPUs, %+v", f.Health.GPUs, ch)
	}

	c2 := serve(t, a)
	c2.send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "nohealth", Host: "node7"})
	var f2 wire.Facts
	c2.recv(wire.KindFacts, &f2)
	if f2.Health != nil {
		t.Errorf("health without a request: %+v", f2.Health)
	}
}

// TestHealthRequestRefused: a request the agent may not act on (a
// command without a timeout) is answered with an Error.
func TestHealthRequestRefused(t *testing.T) {
	c := serve(t, &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t)})
	c.send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "bad", Health: &wire.HealthRequest{Command: "true"}})
	var e wire.Error
	c.recv(wire.KindError, &e)
	if !strings.Contains(e.Msg, "without a timeout") {
		t.Errorf("error %q", e.Msg)
	}
}
