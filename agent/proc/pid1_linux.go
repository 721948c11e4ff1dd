//go:build linux

package proc

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gangway-hpc/gangway/internal/osproc"
)

// pid1Signals are the signals PID1 forwards to the agent: what container
// runtimes and people send to a container's init.
var pid1Signals = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// PID1 does a container init's duties, the way tini does, when this
// process is PID 1 (the agent as a container's entrypoint), and returns
// the exit status and true; otherwise it returns false at once. It
// re-executes this binary with the same arguments and environment as its
// only child (the real agent, which is not PID 1 and so runs normally),
// forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to it,
// and reaps every process that ends up under PID 1 with wait4(-1). So the
// agent's own waits (os/exec) never lose a child's status to a stray
// wait, and orphans never pile up as zombies. When the agent exits, PID1
// returns its exit code, or 128+N when signal N killed it (PID 1 cannot
// die of a signal it raises); the kernel then kills whatever is left in
// the PID namespace.
func PID1(args []string) (code int, ok bool) {
	if os.Getpid() != 1 {
		return 0, false
	}
	return pid1Main(args), true
}

func pid1Main(args []string) int {
	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs, append(pid1Signals, syscall.SIGCHLD)...)
	p, err := os.StartProcess(selfExe, args, &os.ProcAttr{Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s (PID 1): start the agent: %v\n", args[0], err)
		return 1
	}
	child := p.Pid
	for {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil || pid <= 0 {
				break
			}
			if pid == child {
				code, _ := osproc.ExitCode(ws)
				return code
			}
		}
		if sig := <-sigs; sig != syscall.SIGCHLD {
			_ = syscall.Kill(child, sig.(syscall.Signal))
		}
	}
}
