package agent

import (
	"context"
	"strings"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/account"
	"github.com/gangway-hpc/gangway/agent/health"
	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/environ"
	"github.com/gangway-hpc/gangway/internal/textx"
)

// HostVar names, in the environment of the site's health check, the
// host as the launcher knows it (Hello.Host).
const HostVar = "GANGWAY_HOST"

// checkHealth runs the checks h asks for on this host, fresh for this
// attempt: nvidia-smi without the facts' cache, the ranks' TMPDIR, and
// the site's command as the session's user, from the user's home, with
// the environment ranks start from.
func (a *Agent) checkHealth(ctx context.Context, h wire.Hello, f wire.Facts, login account.Login) wire.Health {
	base := a.baseEnv()
	name := h.Host
	if name == "" {
		name = f.Name
	}
	var identity []string
	o := health.Options{NvidiaSMI: a.Facts.NvidiaSMI, DriverGPUs: len(f.GPUs), TmpDir: envValue(base, "TMPDIR")}
	if who := login.Account; who != nil {
		identity = who.Identity()
		o.Site.Credential, o.Site.Dir = who.Credential(), who.Home
	}
	o.Site.Env = environ.Merge(base, identity, []string{HostVar + "=" + name})
	hl := health.Gather(ctx, o, *h.Health)
	var failed []string
	for _, c := range hl.Failed() {
		failed = append(failed, c.Name)
	}
	a.Log.Info("health", zap.String("job", textx.Clip(h.JobID)), zap.Int("gpus", hl.GPUs), zap.Strings("failed", failed))
	return hl
}

// envValue is NAME's value in env, "" when unset.
func envValue(env []string, name string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v
		}
	}
	return ""
}
