package main

import (
	"context"
	"flag"
	"fmt"
	"gangway/internal/term"
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

	"gangway/agent"
	"gangway/agent/pmi"
	"gangway/agent/proc"
	"gangway/agent/sshd"
	"gangway/agent/wire"
	"gangway/cmd/internal/logging"
	"gangway/hostfile"
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
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	fs.Usage = func() { fmt.Fprint(os.Stderr, usage); fs.PrintDefaults() }
	home, _ := os.UserHomeDir()
	defKey := filepath.Join(home, ".config", "gangway", "ssh_host_ed25519_key")
	if os.Geteuid() == 0 {
		defKey = "/etc/gangway/ssh_host_ed25519_key"
	}
	listen := fs.String("listen", ":22122", "address to serve SSH on")
	hostKey := fs.String("host-key", defKey, "host key; an ed25519 key is created (0600) if missing; refused if group or others may access it")
	authKeys := fs.String("authorized-keys", filepath.Join(home, ".ssh", "authorized_keys"), "authorized_keys file for the agent's own user, beside every user's ~/.ssh/authorized_keys (read at every login)")
	hostCert := fs.String("host-cert", "", "host certificate `FILE` of --host-key (the -cert.pub that ssh-keygen -s CA -h writes), offered beside the key")
	userCAs := fs.String("trusted-user-ca-keys", "", "`FILE` of CA public keys whose user certificates log in as their principals (read at every login); default: none")
	permitRoot := fs.String("permit-root-login", sshd.PermitRootProhibitPassword, "root logins: yes, prohibit-password (keys and certificates: the same as yes, the agent takes nothing else) or no")
	var allowUsers, acceptEnv listFlag
	fs.Var(&allowUsers, "allow-users", "only these `USERS` may log in (comma-separated, * and ? patterns; repeatable); default: every user")
	fs.Var(&acceptEnv, "accept-env", "stock sessions also take env requests for names matching `PATTERN` (* and ?; repeatable), beside LANG and LC_*; others are refused")
	dropCachesUsers := fs.String("drop-caches-users", "", "`USERS` besides root who may drop page caches (comma-separated)")
	name := fs.String("name", "", "name reported to the launcher (default: hostname)")
	stdio := fs.Bool("stdio", false, "serve one launcher session on stdin/stdout and exit")
	srun := fs.Bool("srun", false, "started by the launcher's srun step: serve its one session on an ephemeral port, then exit")
	srunWait := fs.Duration("srun-wait", sshd.DefaultSrunWait, "with --srun: exit when the launcher has not come within this long")
	dropCaches := fs.Bool("allow-drop-caches", os.Geteuid() == 0, "let launchers drop page caches (--drop-caches): root logins, and --drop-caches-users")
	startups := sshd.StartupLimits{MaxStartups: sshd.DefaultMaxStartups, MaxStartupsPerSource: sshd.DefaultMaxStartupsPerSource}
	fs.Var(&startups.MaxStartups, "max-startups", "connections not yet authenticated, in total, as sshd's MaxStartups `start:rate:full`: from start on, a new one is refused\n"+
		"with probability rate%, rising to 100% at full (N: a hard cap of N), unless an idle one (its client sent nothing yet) can be closed instead")
	fs.Var(&startups.MaxStartupsPerSource, "max-startups-per-source", "connections not yet authenticated from one address, `start:rate:full` as --max-startups")
	fs.DurationVar(&startups.VersionTimeout, "version-timeout", sshd.DefaultVersionTimeout, "close a connection that has not sent its SSH version line within this long")
	fs.DurationVar(&startups.LoginGraceTime, "login-grace-time", sshd.DefaultLoginGraceTime, "close a connection that has not logged in within this long (sshd's LoginGraceTime)")
	maxSessions := fs.Int("max-sessions", sshd.DefaultMaxSessions, "open sessions (commands, launcher sessions) on one connection; more are refused")
	maxUserConns := fs.Int("max-user-connections", sshd.DefaultMaxUserConnections, "logged-in connections of one user at once; one more has its sessions refused, naming this limit, and is closed")
	maxUserSessions := fs.Int("max-user-sessions", sshd.DefaultMaxUserSessions, "open sessions of one user at once, over all of the user's connections; more are refused")
	maxUserJobs := fs.Int("max-user-jobs", sshd.DefaultMaxUserJobs, "launcher jobs of one user at once (each has a supervisor process); one more is refused, naming this limit")
	startJobTimeout := fs.Duration("start-job-timeout", agent.DefaultStartJobTimeout, "close a launcher session that has sent no job this long after it began\n"+
		"(a launcher sends it once every host is up, within its --start-timeout, page caches are dropped and the preflight is done)")
	cgroup := fs.Bool("cgroup", true, "put each job in a cgroup2 group under the agent's own, where cgroup2 is writable\n(under systemd, give the service Delegate=yes)")
	logFormat := fs.String("log-format", "", "log format: json or console (default: console, with human times, when stderr is a terminal; json otherwise)")
	verbose := fs.Bool("v", false, "debug logs")
	showVersion := fs.Bool("version", false, "print the version and exit")
	launcherTimeout := fs.Duration("launcher-timeout", agent.DefaultLauncherTimeout, "stop a job's ranks when its launcher has sent nothing for this long (it sends a heartbeat every 5s); 0 disables")
	pmiKeys := fs.Int("pmi-max-keys", pmi.DefaultKeys, "PMI keys one job may hold on this host (puts not yet fenced, barrier results, node attributes); a put beyond is refused with a PMI error")
	pmiBytes := fs.Int64("pmi-max-bytes", pmi.DefaultBytes, "bytes (32 MiB by default) of PMI keys and values one job may hold on this host, each key counting 64 more; a put beyond is refused with a PMI error")
	pmiWrite := fs.Duration("pmi-write-timeout", pmi.DefaultWriteTimeout, "a rank that leaves its PMI replies unread this long loses its PMI connection and is stopped, its exit an error")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	for _, c := range []struct {
		name string
		v    int64
	}{{"max-sessions", int64(*maxSessions)}, {"max-user-connections", int64(*maxUserConns)}, {"max-user-sessions", int64(*maxUserSessions)},
		{"max-user-jobs", int64(*maxUserJobs)}, {"pmi-max-keys", int64(*pmiKeys)}, {"pmi-max-bytes", *pmiBytes}} {
		if c.v < 1 {
			fmt.Fprintf(os.Stderr, "agent: --%s %d: must be at least 1\n", c.name, c.v)
			return 2
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"pmi-write-timeout", *pmiWrite}, {"version-timeout", startups.VersionTimeout}, {"login-grace-time", startups.LoginGraceTime},
		{"start-job-timeout", *startJobTimeout}} {
		if d.v <= 0 {
			fmt.Fprintf(os.Stderr, "agent: --%s %v: must be more than 0\n", d.name, d.v)
			return 2
		}
	}
	permit, err := sshd.ParsePermitRootLogin(*permitRoot)
	if err != nil {
		fmt.Fprintf(os.Stderr, "agent: --%v\n", err)
		return 2
	}
	dropUsers := sshd.SplitList(*dropCachesUsers)
	if *showVersion {
		fmt.Printf("agent %s (protocol %d)\n", version, wire.Version)
		return 0
	}
	log := logging.New(logging.Format(*logFormat, term.IsTerminal(os.Stderr)), logging.Level(*verbose, zapcore.InfoLevel), os.Stderr)
	defer log.Sync()
	a := &agent.Agent{Name: *name, Version: version, Log: log.Named("agent"), AllowDropCaches: *dropCaches,
		LauncherTimeout: *launcherTimeout, Supervisor: proc.SupervisorExecutable(), NoCgroup: !*cgroup,
		PMILimits: pmi.Limits{Keys: *pmiKeys, Bytes: *pmiBytes, WriteTimeout: *pmiWrite}}
	if *srun {
		return runSrun(ctx, a, *srunWait, startups, log)
	}
	if *stdio {
		// Other hosts' preflight probes dial this instead of sshd's port.
		if pl, err := agent.ListenProbes(); err != nil {
			log.Debug("no probe listener; probes go to sshd's port", zap.Error(err))
		} else {
			a.ProbePort = pl.Port()
			defer pl.Close()
		}
		rwc := stdioConn{os.Stdin, os.Stdout}
		if err := a.ServeSession(ctx, rwc); err != nil {
			log.Info("session ended", zap.Error(err))
			return 1
		}
		return 0
	}
	a.StartJobTimeout = *startJobTimeout
	key, err := sshd.LoadHostKey(*hostKey)
	if err != nil {
		log.Error("host key", zap.Error(err))
		return 1
	}
	var certSigner ssh.Signer
	if *hostCert != "" {
		s, cert, err := sshd.LoadHostCert(*hostCert, key)
		if err != nil {
			log.Error("host certificate", zap.Error(err))
			return 1
		}
		certSigner = s
		log.Info("host certificate", zap.String("file", *hostCert), zap.String("key_id", cert.KeyId), zap.Strings("principals", cert.ValidPrincipals))
	}
	if _, err := os.Stat(*authKeys); err != nil {
		log.Warn("no --authorized-keys file yet; only users' own ~/.ssh/authorized_keys and certificates let anyone in", zap.String("file", *authKeys))
	}
	listenGiven := false
	fs.Visit(func(f *flag.Flag) { listenGiven = listenGiven || f.Name == "listen" })
	if addr, from := operatorListen(listenGiven, os.Getenv("K_MPI_JOB_ROLE"), sshdConfig); from != "" {
		*listen = addr
		log.Info("listening on the port of the image's sshd_config (mpi-operator worker pod)", zap.String("addr", addr), zap.String("file", from))
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Error("listen", zap.Error(err))
		return 1
	}
	log.Info("serving", zap.String("addr", l.Addr().String()), zap.String("host_key", *hostKey), zap.String("version", version))
	srv := &sshd.Server{Subsystem: a.ServeLogin, Log: log.Named("sshd"), HostKey: key, HostCert: certSigner, AuthorizedKeys: *authKeys,
		TrustedUserCAKeys: *userCAs, PermitRootLogin: permit, AllowUsers: allowUsers, DropCachesUsers: dropUsers,
		AcceptEnv:     append(slices.Clone(sshd.DefaultAcceptEnv), acceptEnv...),
		StartupLimits: startups, MaxSessions: *maxSessions,
		UserLimits: sshd.UserLimits{MaxUserConnections: *maxUserConns, MaxUserSessions: *maxUserSessions, MaxUserJobs: *maxUserJobs}}
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
