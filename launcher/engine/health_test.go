package engine

import (
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/launcher/cli"
)

func TestHealthRequest(t *testing.T) {
	if r := healthRequest(cli.Health{Off: true, Command: "x"}, nil); r != nil {
		t.Errorf("--no-health-check asks for %+v", r)
	}
	h := cli.Health{Command: "/etc/nhc", Timeout: 20 * time.Second, MinTmpFree: 1 << 30}
	r := healthRequest(h, map[string]string{"TMPDIR": "/scratch/tmp"})
	if r == nil || r.Command != "/etc/nhc" || r.Timeout != 20*time.Second || r.MinTmpFree != 1<<30 || r.TmpDir != "/scratch/tmp" {
		t.Errorf("request %+v", r)
	}
	if err := r.Validate(); err != nil {
		t.Error(err)
	}
	// A relative -x TMPDIR is not the agent's to resolve: its own is checked.
	r = healthRequest(cli.Health{Timeout: time.Second}, map[string]string{"TMPDIR": "tmp"})
	if r.TmpDir != "" || r.Command != "" || r.Timeout != 0 {
		t.Errorf("request %+v", r)
	}
}
