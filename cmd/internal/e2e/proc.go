package e2e

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/agenttest"
	"github.com/gangway-hpc/gangway/agent/proc"
	"github.com/gangway-hpc/gangway/internal/osproc"
)

// Proc is a real process started by a test: a bin/agent or a bin/launcher.
type Proc struct {
	Cmd            *exec.Cmd
	Stdout, Stderr *Output
	Started, Ended time.Time

	done chan struct{}
	code int
}

// StartProc starts name with args in its own process group, with the
// test's environment plus env, output captured. Ranks started through it
// get GORACE=atexit_sleep_ms=0. Cleanup ends the process if it still runs:
// SIGTERM, then after 15 s SIGKILL to its group, by pid.
func StartProc(t testing.TB, env []string, name string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Stdout: &Output{}, Stderr: &Output{}, done: make(chan struct{})}
	cmd := exec.Command(name, args...)
	cmd.Env = append(append(os.Environ(), agenttest.RankEnv()...), env...)
	cmd.Stdout, cmd.Stderr = p.Stdout, p.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.Cmd = cmd
	p.Started = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("e2e: start %s: %v", name, err)
	}
	killLeftoverRanks(t, p.Stdout)
	go func() {
		defer close(p.done)
		err := cmd.Wait()
		p.Ended = time.Now()
		p.code = cmd.ProcessState.ExitCode()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			p.code = -2
		}
		p.Stdout.end()
		p.Stderr.end()
	}()
	t.Cleanup(func() {
		pid := cmd.Process.Pid
		select {
		case <-p.done:
		default:
			_ = syscall.Kill(pid, syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(15 * time.Second):
				t.Logf("e2e: %s (pid %d) ignored SIGTERM for 15s; killing its group", filepath.Base(name), pid)
				_ = osproc.KillGroup(pid, syscall.SIGKILL)
				<-p.done
			}
		}
		if t.Failed() {
			t.Logf("e2e: %s (pid %d) exit %d; stderr:\n%s", filepath.Base(name), pid, p.code, p.Stderr)
		}
	})
	return p
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Kill sends SIGKILL to the process (not its group).
func (p *Proc) Kill() error { return syscall.Kill(p.Pid(), syscall.SIGKILL) }

// Done is closed when the process has exited and its output is drained.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Code is the exit code (-1 when killed by a signal); valid after Done.
func (p *Proc) Code() int { <-p.done; return p.code }

// Wait waits up to Deadline for the process and returns its exit code; it
// fails the test at the deadline.
func (p *Proc) Wait(t testing.TB) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(Deadline):
		t.Fatalf("e2e: %s did not finish within %v\nstdout:\n%s\nstderr:\n%s", p.Cmd.Path, Deadline, p.Stdout, p.Stderr)
		return -1
	}
}

var servingRE = regexp.MustCompile(`"msg":"serving".*?"addr":"([0-9.]+):(\d+)"`)

// ProcOption adjusts how StartProcs starts each agent process.
type ProcOption func(*procOptions)

type procOptions struct {
	wrap, args []string
}

// Wrapped starts each agent through a command prefix that execs or runs
// it, its stderr passed through: Wrapped("prlimit", "--nofile=128:128"),
// or unshare(1) with its options. Cluster.Procs then holds the prefix's
// processes.
func Wrapped(cmd ...string) ProcOption {
	return func(o *procOptions) { o.wrap = cmd }
}

// AgentArgs adds options to each agent's command line.
func AgentArgs(args ...string) ProcOption {
	return func(o *procOptions) { o.args = args }
}

// StartProcs starts n agent processes of agentBin (BuildBinaries) on
// 127.0.B.1..n with ephemeral ports, host keys in the cluster's
// directory and the cluster's authorized_keys, and waits until each
// serves. Cluster.Procs holds each agent's process; cleanup stops them.
func StartProcs(t testing.TB, n int, agentBin string, opts ...ProcOption) *Cluster {
	t.Helper()
	var o procOptions
	for _, f := range opts {
		f(&o)
	}
	c := &Cluster{Cluster: agenttest.NewCluster(t, n)}
	for _, h := range c.Hosts {
		argv := append(append([]string{}, o.wrap...), agentBin,
			"--listen", net.JoinHostPort(h.Addr, "0"),
			"--host-key", h.HostKey,
			"--authorized-keys", c.Keys.AuthorizedKeys,
			"--name", h.Name,
			"--log-format", "json")
		argv = append(argv, o.args...)
		c.Procs = append(c.Procs, StartProc(t, nil, argv[0], argv[1:]...))
	}
	for i, h := range c.Hosts {
		s, ok := c.Procs[i].Stderr.WaitFor(Deadline, func(s string) bool { return servingRE.MatchString(s) })
		if !ok {
			t.Fatalf("e2e: agent %s did not start serving within %v:\n%s", h.Name, Deadline, s)
		}
		m := servingRE.FindStringSubmatch(s)
		if m[1] != h.Addr {
			t.Fatalf("e2e: agent %s serves on %s, want %s", h.Name, m[1], h.Addr)
		}
		h.Port, _ = strconv.Atoi(m[2])
	}
	c.WriteKnownHosts(t)
	return c
}

var build struct {
	once sync.Once
	dir  string
	err  error
}

// BuildBinaries builds cmd/launcher and cmd/agent (go build, no race
// detector) once per test process into a temporary directory and returns
// their paths. TestMain should call RemoveBinaries after m.Run.
func BuildBinaries(t testing.TB) (launcherBin, agentBin string) {
	t.Helper()
	build.once.Do(func() {
		t0 := time.Now()
		build.dir, build.err = os.MkdirTemp("", "gangway-e2e-bin-")
		if build.err != nil {
			return
		}
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		}
		cmd := exec.Command(goTool, "build", "-o", build.dir+string(filepath.Separator), "github.com/gangway-hpc/gangway/cmd/launcher", "github.com/gangway-hpc/gangway/cmd/agent")
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build: %w\n%s", err, out)
			return
		}
		t.Logf("e2e: built bin/launcher and bin/agent in %v", time.Since(t0).Round(time.Millisecond))
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return filepath.Join(build.dir, "launcher"), filepath.Join(build.dir, "agent")
}

// RemoveBinaries deletes what BuildBinaries built.
func RemoveBinaries() {
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
}

// DefaultSignals makes the programs this test process starts (launchers,
// agents, ranks) begin with default signal dispositions, as a user's
// terminal shell starts them, even when the suite itself runs under nohup
// or as `make test &` from a script: their ignored SIGHUP or SIGINT
// would survive exec, and a launcher honours an inherited SIG_IGN (nohup
// means it), so a test of what SIGHUP does would test nohup instead. A
// TestMain calls it before m.Run, after its helper modes, which keep what
// they inherited. Tests of a careless parent set their ignores
// themselves (DirtyEnv).
func DefaultSignals() { proc.DefaultSignalsForChildren() }
