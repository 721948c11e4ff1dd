package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent"
	"github.com/gangway-hpc/gangway/agent/pmi"
	"github.com/gangway-hpc/gangway/agent/proc"
	"github.com/gangway-hpc/gangway/agent/sshd"
	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/cmd/internal/logging"
	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/internal/term"
)

// version is stamped by the Makefile.
var version = "dev"

const usage = `usage: agent [options]

Serves SSH on --listen for stock clients (ssh, Open MPI's orted) and for
the gangway launcher (subsystem "gangway"); or, with --stdio, one launcher
session over stdin/stdout (started by 'launcher --transport ssh'); or,
with --srun, one launcher session on an ephemeral port with an ephemeral
host key (started by the srun step of 'launcher --transport slurm').
It runs Go code on one CPU at a time (GOMAXPROCS=1) unless the
GOMAXPROCS environment variable is set.

Options:
`

func run(ctx context.Context, args []string) int {
	fs, o := newFlags()
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	fs.Visit(func(f *flag.Flag) { o.listenGiven = o.listenGiven || f.Name == "listen" })
	permit, err := o.check()
	if err != nil {
		fmt.Fprintf(os.Stderr, "agent: --%v\n", err)
		return 2
	}
	if *o.showVersion {
		fmt.Printf("agent %s (protocol %d)\n", version, wire.Version)
		return 0
	}
	log := logging.New(logging.Format(*o.logFormat, term.IsTerminal(os.Stderr)), logging.Level(*o.verbose, zapcore.InfoLevel), os.Stderr)
	defer log.Sync()
	a := &agent.Agent{Name: *o.name, Version: version, Log: log.Named("agent"), AllowDropCaches: *o.dropCaches,
		LauncherTimeout: *o.launcherTimeout, Supervisor: proc.SupervisorExecutable(), NoCgroup: !*o.cgroup,
		PMILimits: pmi.Limits{Keys: *o.pmiKeys, Bytes: *o.pmiBytes, WriteTimeout: *o.pmiWrite}}
	switch {
	case *o.srun:
		return runSrun(ctx, a, *o.srunWait, o.startups, log)
	case *o.stdio:
		return runStdio(ctx, a, *o.stdioMarker, log)
	}
	a.StartJobTimeout = *o.startJobTimeout
	return serve(ctx, a, o, permit, log)
}

// options are the agent's command line (newFlags).
type options struct {
	listen, hostKey, authKeys, hostCert, userCAs, permitRoot, dropCachesUsers, name, logFormat *string
	allowUsers, acceptEnv                                                                      listFlag
	stdio, stdioMarker, srun, dropCaches, cgroup, verbose, showVersion                         *bool
	srunWait, startJobTimeout, launcherTimeout, pmiWrite                                       *time.Duration
	startups                                                                                   sshd.StartupLimits
	maxSessions, maxUserConns, maxUserSessions, maxUserJobs, pmiKeys                           *int
	pmiBytes                                                                                   *int64
	listenGiven                                                                                bool // --listen was given
}

// newFlags defines the agent's flags, their values going to o.
func newFlags() (*flag.FlagSet, *options) {
	o := &options{}
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	fs.Usage = func() { fmt.Fprint(os.Stderr, usage); fs.PrintDefaults() }
	home, _ := os.UserHomeDir()
	defKey := filepath.Join(home, ".config", "gangway", "ssh_host_ed25519_key")
	if os.Geteuid() == 0 {
		defKey = "/etc/gangway/ssh_host_ed25519_key"
	}
	o.listen = fs.String("listen", ":22122", "address to serve SSH on")
	o.hostKey = fs.String("host-key", defKey, "host key; an ed25519 key is created (0600) if missing; refused if group or others may access it")
	o.authKeys = fs.String("authorized-keys", filepath.Join(home, ".ssh", "authorized_keys"), "authorized_keys file for the agent's own user, beside every user's ~/.ssh/authorized_keys (read at every login)")
	o.hostCert = fs.String("host-cert", "", "host certificate `FILE` of --host-key (the -cert.pub that ssh-keygen -s CA -h writes), offered beside the key")
	o.userCAs = fs.String("trusted-user-ca-keys", "", "`FILE` of CA public keys whose user certificates log in as their principals (read at every login); default: none")
	o.permitRoot = fs.String("permit-root-login", sshd.PermitRootProhibitPassword, "root logins: yes, prohibit-password (keys and certificates: the same as yes, the agent takes nothing else) or no")
	fs.Var(&o.allowUsers, "allow-users", "only these `USERS` may log in (comma-separated, * and ? patterns; repeatable); default: every user")
	fs.Var(&o.acceptEnv, "accept-env", "stock sessions also take env requests for names matching `PATTERN` (* and ?; repeatable), beside LANG and LC_*; others are refused")
	o.dropCachesUsers = fs.String("drop-caches-users", "", "`USERS` besides root who may drop page caches (comma-separated)")
	o.name = fs.String("name", "", "name reported to the launcher (default: hostname)")
	o.stdio = fs.Bool("stdio", false, "serve one launcher session on stdin/stdout and exit")
	o.stdioMarker = fs.Bool("stdio-marker", false, "with --stdio: first write the line "+strings.TrimSpace(wire.StdioMarker)+" on stdout, so that the launcher can tell the session from what the remote shell printed before it (a ~/.bashrc that writes to stdout)")
	o.srun = fs.Bool("srun", false, "started by the launcher's srun step: serve its one session on an ephemeral port, then exit")
	o.srunWait = fs.Duration("srun-wait", sshd.DefaultSrunWait, "with --srun: exit when the launcher has not come within this long")
	o.dropCaches = fs.Bool("allow-drop-caches", os.Geteuid() == 0, "let launchers drop page caches (--drop-caches): root logins, and --drop-caches-users")
	o.startups = sshd.StartupLimits{MaxStartups: sshd.DefaultMaxStartups, MaxStartupsPerSource: sshd.DefaultMaxStartupsPerSource}
	fs.Var(&o.startups.MaxStartups, "max-startups", "connections not yet authenticated, in total, as sshd's MaxStartups `start:rate:full`: from start on, a new one is refused\n"+
		"with probability rate%, rising to 100% at full (N: a hard cap of N), unless an idle one (its client sent nothing yet) can be closed instead")
	fs.Var(&o.startups.MaxStartupsPerSource, "max-startups-per-source", "connections not yet authenticated from one address, `start:rate:full` as --max-startups")
	fs.DurationVar(&o.startups.VersionTimeout, "version-timeout", sshd.DefaultVersionTimeout, "close a connection that has not sent its SSH version line within this long")
	fs.DurationVar(&o.startups.LoginGraceTime, "login-grace-time", sshd.DefaultLoginGraceTime, "close a connection that has not logged in within this long (sshd's LoginGraceTime)")
	o.maxSessions = fs.Int("max-sessions", sshd.DefaultMaxSessions, "open sessions (commands, launcher sessions) on one connection; more are refused")
	o.maxUserConns = fs.Int("max-user-connections", sshd.DefaultMaxUserConnections, "logged-in connections of one user at once; one more has its sessions refused, naming this limit, and is closed")
	o.maxUserSessions = fs.Int("max-user-sessions", sshd.DefaultMaxUserSessions, "open sessions of one user at once, over all of the user's connections; more are refused")
	o.maxUserJobs = fs.Int("max-user-jobs", sshd.DefaultMaxUserJobs, "launcher jobs of one user at once (each has a supervisor process); one more is refused, naming this limit")
	o.startJobTimeout = fs.Duration("start-job-timeout", agent.DefaultStartJobTimeout, "close a launcher session that has sent no job this long after it began\n"+
		"(a launcher sends it once every host is up, within its --start-timeout, page caches are dropped and the preflight is done)")
	o.cgroup = fs.Bool("cgroup", true, "put each job in a cgroup2 group under the agent's own, where cgroup2 is writable\n(under systemd, give the service Delegate=yes)")
	o.logFormat = fs.String("log-format", "", "log format: json or console (default: console, with human times, when stderr is a terminal; json otherwise)")
	o.verbose = fs.Bool("v", false, "debug logs")
	o.showVersion = fs.Bool("version", false, "print the version and exit")
	o.launcherTimeout = fs.Duration("launcher-timeout", agent.DefaultLauncherTimeout, "stop a job's ranks when its launcher has sent nothing for this long (it sends a heartbeat every 5s); 0 disables")
	o.pmiKeys = fs.Int("pmi-max-keys", pmi.DefaultKeys, "PMI keys one job may hold on this host (puts not yet fenced, barrier results, node attributes); a put beyond is refused with a PMI error")
	o.pmiBytes = fs.Int64("pmi-max-bytes", pmi.DefaultBytes, "bytes (32 MiB by default) of PMI keys and values one job may hold on this host, each key counting 64 more; a put beyond is refused with a PMI error")
	o.pmiWrite = fs.Duration("pmi-write-timeout", pmi.DefaultWriteTimeout, "a rank that leaves its PMI replies unread this long loses its PMI connection and is stopped, its exit an error")
	return fs, o
}

// check refuses values out of range, and returns --permit-root-login's.
func (o *options) check() (permit string, err error) {
	for _, c := range []struct {
		name string
		v    int64
	}{{"max-sessions", int64(*o.maxSessions)}, {"max-user-connections", int64(*o.maxUserConns)}, {"max-user-sessions", int64(*o.maxUserSessions)},
		{"max-user-jobs", int64(*o.maxUserJobs)}, {"pmi-max-keys", int64(*o.pmiKeys)}, {"pmi-max-bytes", *o.pmiBytes}} {
		if c.v < 1 {
			return "", fmt.Errorf("%s %d: must be at least 1", c.name, c.v)
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"pmi-write-timeout", *o.pmiWrite}, {"version-timeout", o.startups.VersionTimeout}, {"login-grace-time", o.startups.LoginGraceTime},
		{"start-job-timeout", *o.startJobTimeout}} {
		if d.v <= 0 {
			return "", fmt.Errorf("%s %v: must be more than 0", d.name, d.v)
		}
	}
	return sshd.ParsePermitRootLogin(*o.permitRoot)
}

// runStdio is `agent --stdio`: one launcher session on stdin and stdout
// (started by the launcher's ssh transport), after wire.StdioMarker when
// marker is set.
func runStdio(ctx context.Context, a *agent.Agent, marker bool, log *zap.Logger) int {
	// Other hosts' preflight probes dial this instead of sshd's port.
	if pl, err := agent.ListenProbes(); err != nil {
		log.Debug("no probe listener; probes go to sshd's port", zap.Error(err))
	} else {
		a.ProbePort = pl.Port()
		defer pl.Close()
	}
	if marker {
		if _, err := io.WriteString(os.Stdout, wire.StdioMarker); err != nil {
			log.Info("session ended before it began", zap.Error(err))
			return 1
		}
	}
	rwc := stdioConn{os.Stdin, os.Stdout}
	if err := a.ServeSession(ctx, rwc); err != nil {
		log.Info("session ended", zap.Error(err))
		return 1
	}
	return 0
}

// serve is the agent's SSH server on --listen, handing launcher sessions
// to a, until ctx ends.
func serve(ctx context.Context, a *agent.Agent, o *options, permit string, log *zap.Logger) int {
	key, err := sshd.LoadHostKey(*o.hostKey)
	if err != nil {
		log.Error("host key", zap.Error(err))
		return 1
	}
	var certSigner ssh.Signer
	if *o.hostCert != "" {
		s, cert, err := sshd.LoadHostCert(*o.hostCert, key)
		if err != nil {
			log.Error("host certificate", zap.Error(err))
			return 1
		}
		certSigner = s
		log.Info("host certificate", zap.String("file", *o.hostCert), zap.String("key_id", cert.KeyId), zap.Strings("principals", cert.ValidPrincipals))
	}
	if _, err := os.Stat(*o.authKeys); err != nil {
		log.Warn("no --authorized-keys file yet; only users' own ~/.ssh/authorized_keys and certificates let anyone in", zap.String("file", *o.authKeys))
	}
	listen := *o.listen
	if addr, from := operatorListen(o.listenGiven, os.Getenv("K_MPI_JOB_ROLE"), sshdConfig); from != "" {
		listen = addr
		log.Info("listening on the port of the image's sshd_config (mpi-operator worker pod)", zap.String("addr", addr), zap.String("file", from))
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		log.Error("listen", zap.Error(err))
		return 1
	}
	// The fingerprint is what `ssh-keygen -lf` prints for the key and what
	// a first connection's prompt shows: compare them before trusting.
	log.Info("serving", zap.String("addr", l.Addr().String()), zap.String("host_key", *o.hostKey),
		zap.String("host_key_type", key.PublicKey().Type()), zap.String("host_key_fingerprint", ssh.FingerprintSHA256(key.PublicKey())),
		zap.String("version", version))
	srv := &sshd.Server{Subsystem: a.ServeLogin, Log: log.Named("sshd"), HostKey: key, HostCert: certSigner, AuthorizedKeys: *o.authKeys,
		TrustedUserCAKeys: *o.userCAs, PermitRootLogin: permit, AllowUsers: o.allowUsers, DropCachesUsers: sshd.SplitList(*o.dropCachesUsers),
		AcceptEnv:     append(slices.Clone(sshd.DefaultAcceptEnv), o.acceptEnv...),
		StartupLimits: o.startups, MaxSessions: *o.maxSessions,
		UserLimits: sshd.UserLimits{MaxUserConnections: *o.maxUserConns, MaxUserSessions: *o.maxUserSessions, MaxUserJobs: *o.maxUserJobs}}
	if err := srv.Serve(ctx, l); err != nil {
		log.Error("serve", zap.Error(err))
		return 1
	}
	return 0
}

// listFlag is a repeatable flag whose values may also be comma-separated.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	*l = append(*l, sshd.SplitList(s)...)
	return nil
}

type stdioConn struct {
	io.Reader
	io.WriteCloser
}

func (s stdioConn) Close() error { return s.WriteCloser.Close() }

// sshdConfig is the sshd configuration an mpi-operator worker image would
// have served with.
const sshdConfig = "/etc/ssh/sshd_config"

// operatorListen is the address to serve on in an mpi-operator worker pod
// (K_MPI_JOB_ROLE=worker) where --listen was not given: the Port its
// image's sshd configuration sets (the operator's base images: 2222),
// which its launcher's ssh dials. from is the file it came from; "" keeps
// --listen.
func operatorListen(listenGiven bool, role, path string) (addr, from string) {
	if listenGiven || role != "worker" {
		return "", ""
	}
	f, err := os.Open(path)
	if err != nil {
		return "", ""
	}
	defer f.Close()
	port, ok := hostfile.SSHConfigPort(f)
	if !ok {
		return "", ""
	}
	return ":" + strconv.Itoa(port), path
}
