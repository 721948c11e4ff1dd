package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent"
	"github.com/gangway-hpc/gangway/agent/sshd"
	"github.com/gangway-hpc/gangway/agent/wire"
)

// runSrun is `agent --srun`: one agent of the launcher's srun step (see
// sshd.ServeSrun). Its stdout carries the readiness line and nothing
// else; logs go to stderr, which srun also passes to the launcher.
func runSrun(ctx context.Context, a *agent.Agent, wait time.Duration, startups sshd.StartupLimits, log *zap.Logger) int {
	key, err := sshd.ParseLauncherKey(os.Getenv(wire.SrunKeyEnv))
	if err != nil {
		log.Error("srun mode", zap.Error(err))
		return 2
	}
	if a.Name == "" {
		a.Name = os.Getenv("SLURMD_NODENAME")
	}
	if a.Name == "" {
		a.Name, _ = os.Hostname()
	}
	a.BaseEnv = agent.SrunRankEnv(os.Environ())
	hk, err := sshd.NewEphemeralHostKey()
	if err != nil {
		log.Error("host key", zap.Error(err))
		return 1
	}
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		log.Error("listen", zap.Error(err))
		return 1
	}
	ready, err := sshd.SrunReadyLine(a.Name, l, hk, os.Getenv("SLURM_LAUNCH_NODE_IPADDR"))
	if err != nil {
		l.Close()
		log.Error("readiness line", zap.Error(err))
		return 1
	}
	// One write: srun passes whole lines, and this is the only one.
	if _, err := fmt.Fprintln(os.Stdout, ready.String()); err != nil {
		l.Close()
		log.Error("write the readiness line", zap.Error(err))
		return 1
	}
	log.Debug("serving the launcher's srun session", zap.String("addr", ready.Addr), zap.String("node", a.Name))
	err = sshd.ServeSrun(ctx, sshd.SrunOptions{Log: a.Log, Session: a.ServeSession, Listener: l, HostKey: hk, Launcher: key, Wait: wait, StartupLimits: startups})
	switch {
	case err == nil:
		return 0
	case errors.Is(err, sshd.ErrNoLauncher):
		log.Warn("exiting", zap.Error(err))
	default:
		log.Info("session ended", zap.Error(err))
	}
	// Non-zero: with srun --kill-on-bad-exit, Slurm ends the whole step.
	return 1
}
