package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"gangway/agent"
	"gangway/agent/wire"
	"gangway/cmd/internal/logging"
)

// version is stamped by the Makefile.
var version = "dev"

const usage = `usage: agent [options]

Serves SSH on --listen for stock clients (ssh, Open MPI's orted) and for
the gangway launcher (subsystem "gangway"); or, with --stdio, one launcher
session over stdin/stdout (started by 'launcher --transport ssh'); or,
with --srun, one launcher session on an ephemeral port with an ephemeral
host key (started by the srun step of 'launcher --transport slurm').

Options:
`

func run(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	fs.Usage = func() { fmt.Fprint(os.Stderr, usage); fs.PrintDefaults() }
	home, _ := os.UserHomeDir()
	defKey := filepath.Join(home, ".config", "gangway", "ssh_host_ed25519_key")
	if os.Geteuid() == 0 {
		defKey = "/etc/gangway/ssh_host_ed25519_key"
	}
	listen := fs.String("listen", ":22122", "address to serve SSH on")
	hostKey := fs.String("host-key", defKey, "ed25519 host key; created (0600) if missing")
	authKeys := fs.String("authorized-keys", filepath.Join(home, ".ssh", "authorized_keys"), "authorized_keys file (read at every login)")
	name := fs.String("name", "", "name reported to the launcher (default: hostname)")
	stdio := fs.Bool("stdio", false, "serve one launcher session on stdin/stdout and exit")
	srun := fs.Bool("srun", false, "started by the launcher's srun step: serve its one session on an ephemeral port, then exit")
	srunWait := fs.Duration("srun-wait", agent.DefaultSrunWait, "with --srun: exit when the launcher has not come within this long")
	dropCaches := fs.Bool("allow-drop-caches", os.Geteuid() == 0, "let launchers drop page caches (--drop-caches)")
	logFormat := fs.String("log-format", "json", "log format: json or console")
	verbose := fs.Bool("v", false, "debug logs")
	showVersion := fs.Bool("version", false, "print the version and exit")
	launcherTimeout := fs.Duration("launcher-timeout", agent.DefaultLauncherTimeout, "stop a job's ranks when its launcher has sent nothing for this long (it sends a heartbeat every 5s); 0 disables")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if *showVersion {
		fmt.Printf("agent %s (protocol %d)\n", version, wire.Version)
		return 0
	}
	log := logging.New(*logFormat, logging.Level(*verbose, zapcore.InfoLevel), os.Stderr)
	defer log.Sync()
	a := &agent.Agent{Name: *name, Version: version, Log: log.Named("agent"), AllowDropCaches: *dropCaches, LauncherTimeout: *launcherTimeout}
	if *srun {
		return runSrun(ctx, a, *srunWait, log)
	}
	if *stdio {
		rwc := stdioConn{os.Stdin, os.Stdout}
		if err := a.ServeSession(ctx, rwc); err != nil {
			log.Info("session ended", zap.Error(err))
			return 1
		}
		return 0
	}
	key, err := agent.LoadHostKey(*hostKey)
	if err != nil {
		log.Error("host key", zap.Error(err))
		return 1
	}
	if _, err := os.Stat(*authKeys); err != nil {
		log.Warn("no authorized keys yet; every login is refused until the file exists", zap.String("file", *authKeys))
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Error("listen", zap.Error(err))
		return 1
	}
	log.Info("serving", zap.String("addr", l.Addr().String()), zap.String("host_key", *hostKey), zap.String("version", version))
	srv := &agent.Server{Agent: a, Log: log.Named("sshd"), HostKey: key, AuthorizedKeys: *authKeys}
	if err := srv.Serve(ctx, l); err != nil {
		log.Error("serve", zap.Error(err))
		return 1
	}
	return 0
}

type stdioConn struct {
	io.Reader
	io.WriteCloser
}

func (s stdioConn) Close() error { return s.WriteCloser.Close() }
