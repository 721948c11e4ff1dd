package engine

import (
	"path/filepath"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/health"
)

// healthRequest is what every Hello asks its agent to check before the
// attempt: nil with --no-health-check. The ranks' TMPDIR is -x's when it
// sets an absolute one; else the agent's own.
func healthRequest(h cli.Health, vars map[string]string) *wire.HealthRequest {
	if h.Off {
		return nil
	}
	r := &wire.HealthRequest{MinTmpFree: h.MinTmpFree}
	if h.Command != "" {
		r.Command, r.Timeout = h.Command, h.Timeout
	}
	if t := vars["TMPDIR"]; filepath.IsAbs(t) {
		r.TmpDir = t
	}
	return r
}

// Health is every host's verdict for this attempt, in the layout's
// order: its agent's checks and those that compare hosts; nil with
// --no-health-check.
func (c *Cluster) Health(h cli.Health) []health.Host {
	if h.Off {
		return nil
	}
	names := make([]string, len(c.sessions))
	facts := make([]wire.Facts, len(c.sessions))
	for i, s := range c.sessions {
		names[i], facts[i] = s.host.Name, s.facts
	}
	return health.Judge(names, facts, health.Options{GPUsPerHost: h.GPUsPerHost})
}

// checkHealth stops an attempt whose hosts are not all healthy, before
// anything is prepared on any of them.
func checkHealth(log *zap.Logger, cfg cli.Config, c *Cluster) error {
	hosts := c.Health(cfg.Health)
	for _, h := range hosts {
		var failed []string
		for _, ch := range h.Failed() {
			failed = append(failed, ch.Name)
		}
		log.Info("health", zap.String("host", h.Label()), zap.Strings("failed", failed))
	}
	return health.Err(hosts)
}
