package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gangway-hpc/gangway/agent"
	"github.com/gangway-hpc/gangway/agent/proc"
	"github.com/gangway-hpc/gangway/cmd/internal/logging"
	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/launcher"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// version and commit are stamped by the Makefile (-ldflags -X
// main.version=... -X main.commit=...) from git describe and git
// rev-parse; a plain go build says devel and leaves the commit to the Go
// toolchain's VCS stamp, if any.
var (
	version = cli.DevelVersion
	commit  string
)

func run(args []string, sig <-chan os.Signal) int {
	ctx, cancel := context.WithCancel(context.Background())
	cwd, _ := os.Getwd()
	local := &localAgent{}
	defer local.wait() // the in-process agent's sessions, which Main closed
	defer cancel()
	d := launcher.Deps{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Signals: sig, Version: version, Commit: commit, Cwd: cwd,
		NewLocal: func(log *zap.Logger) transport.Dialer {
			local.agent = &agent.Agent{Version: version, Log: log.Named("agent"), AllowDropCaches: os.Geteuid() == 0,
				LauncherTimeout: agent.DefaultLauncherTimeout, Supervisor: proc.SupervisorExecutable()}
			return local
		},
	}
	return launcher.Main(ctx, args, d, newLogger)
}

// newLogger is the launcher's logger on stderr: warnings and errors, or
// everything with -v.
func newLogger(format string, verbose bool) *zap.Logger {
	return logging.New(format, logging.Level(verbose, zapcore.WarnLevel), os.Stderr)
}

// localAgent serves localhost with the agent code in this process, over a
// socketpair, so local and remote ranks share one code path.
type localAgent struct {
	agent *agent.Agent
	wg    sync.WaitGroup
}

func (l *localAgent) Dial(ctx context.Context, h hostfile.Host) (io.ReadWriteCloser, string, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, "", fmt.Errorf("socketpair: %w", err)
	}
	ours, err := fileConn(fds[0], "launcher")
	if err != nil {
		syscall.Close(fds[1])
		return nil, "", err
	}
	theirs, err := fileConn(fds[1], "agent")
	if err != nil {
		ours.Close()
		return nil, "", err
	}
	l.wg.Go(func() {
		if err := l.agent.ServeSession(context.WithoutCancel(ctx), theirs); err != nil {
			l.agent.Log.Debug("local session ended", zap.Error(err))
		}
	})
	return ours, "127.0.0.1", nil
}

func (l *localAgent) wait() { l.wg.Wait() }

func fileConn(fd int, name string) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("socketpair conn: %w", err)
	}
	return c, nil
}
