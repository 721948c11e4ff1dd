package e2e

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gangway-hpc/gangway/agent/proc/proctest"
	"github.com/gangway-hpc/gangway/internal/osproc"
	"github.com/gangway-hpc/gangway/launcher"
)

// Output collects a stream and lets tests wait for what they expect in it.
type Output struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed at the next write or at the end
	ended   bool
}

// Write appends p.
func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.b.Write(p)
	o.wake()
	return len(p), nil
}

func (o *Output) wake() {
	if o.changed != nil {
		close(o.changed)
		o.changed = nil
	}
}

// end marks the stream finished: WaitFor stops waiting for more.
func (o *Output) end() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ended = true
	o.wake()
}

// String is everything written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// WaitFor waits until cond holds for the text written so far, the stream
// ends, or d passes; it returns the text and whether cond held.
func (o *Output) WaitFor(d time.Duration, cond func(string) bool) (string, bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		o.mu.Lock()
		s := o.b.String()
		if cond(s) {
			o.mu.Unlock()
			return s, true
		}
		if o.ended {
			o.mu.Unlock()
			return s, false
		}
		if o.changed == nil {
			o.changed = make(chan struct{})
		}
		ch := o.changed
		o.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			s := o.String()
			return s, cond(s)
		}
	}
}

var readyRE = regexp.MustCompile(`(?m)^\[(\d+)\] ready (\d+)$`)

// ReadyPids maps rank to pid from the "[R] ready PID" lines that proctest
// modes (sleep, failonfile, trapterm...) print through the launcher.
func ReadyPids(out string) map[int]int {
	m := map[int]int{}
	for _, g := range readyRE.FindAllStringSubmatch(out, -1) {
		r, _ := strconv.Atoi(g[1])
		p, _ := strconv.Atoi(g[2])
		m[r] = p
	}
	return m
}

var childRE = regexp.MustCompile(`(?m)^\[(\d+)\] child (\d+)$`)

// ChildPids maps rank to pid from the "[R] child PID" lines of ranks that
// started a child (proctest's grandchild mode, a shell's background job).
func ChildPids(out string) map[int]int {
	m := map[int]int{}
	for _, g := range childRE.FindAllStringSubmatch(out, -1) {
		r, _ := strconv.Atoi(g[1])
		p, _ := strconv.Atoi(g[2])
		m[r] = p
	}
	return m
}

// HasReady returns a WaitFor condition: n ranks printed "ready PID".
func HasReady(n int) func(string) bool {
	return func(s string) bool { return len(ReadyPids(s)) >= n }
}

// killLeftoverRanks registers a cleanup that kills, by pid, every rank
// seen in out that still runs this test binary: a safety net for tests
// that fail before proving their ranks gone.
func killLeftoverRanks(t testing.TB, out *Output) {
	self, _ := os.Executable()
	t.Cleanup(func() {
		for _, pid := range ReadyPids(out.String()) {
			if proctest.Gone(pid) {
				continue
			}
			if exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); exe != self {
				continue
			}
			t.Logf("e2e: killing leftover rank pid %d", pid)
			_ = osproc.KillGroup(pid, syscall.SIGKILL) // ranks lead their groups
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// Launch is an in-process launcher run (launcher.Main in a goroutine).
type Launch struct {
	Stdout, Stderr *Output
	Started, Ended time.Time

	sigs chan os.Signal
	done chan struct{}
	code int
}

// Start runs launcher.Main with args in a goroutine. Fields of d that are
// unset get: Stdout and Stderr into l.Stdout and l.Stderr, Signals from
// l.Signal, Cwd the test's working directory, and a logger like
// cmd/launcher's (console, warnings; debug with -v) writing to l.Stderr.
// Remote nil means the launcher builds its SSH dialer from args (-i,
// --known-hosts...). Cleanup stops the run if it is still going.
func Start(t testing.TB, d launcher.Deps, args ...string) *Launch {
	t.Helper()
	l := &Launch{Stdout: &Output{}, Stderr: &Output{}, sigs: make(chan os.Signal, 2), done: make(chan struct{})}
	d.Stdout, d.Stderr, d.Signals = l.Stdout, l.Stderr, l.sigs
	if d.Cwd == "" {
		d.Cwd, _ = os.Getwd()
	}
	if d.Version == "" {
		d.Version = "e2e"
	}
	// Not zaptest: the launcher's log records belong in l.Stderr, in order
	// with what the launcher prints there itself, as cmd/launcher's logger
	// writes them to the real stderr. Tests read them there
	// (TestStartWaitShowsMissing wants the "waiting for hosts" warning
	// before the failure); zaptest writes only to the test's log.
	newLogger := func(format string, verbose bool) *zap.Logger {
		level := zap.NewAtomicLevelAt(zap.WarnLevel)
		if verbose {
			level.SetLevel(zap.DebugLevel)
		}
		enc := zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
		if format == "json" {
			enc = zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
		}
		return zap.New(zapcore.NewCore(enc, zapcore.AddSync(l.Stderr), level))
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	killLeftoverRanks(t, l.Stdout)
	l.Started = time.Now()
	go func() {
		defer close(l.done)
		defer cancel()
		l.code = launcher.Main(ctx, args, d, newLogger)
		l.Ended = time.Now()
		l.Stdout.end()
		l.Stderr.end()
	}()
	t.Cleanup(func() {
		select {
		case <-l.done:
			return
		default:
		}
		cancel()
		l.Signal(syscall.SIGTERM)
		select {
		case <-l.done:
			return
		case <-time.After(10 * time.Second):
		}
		l.Signal(syscall.SIGTERM) // the second signal kills every rank
		select {
		case <-l.done:
		case <-time.After(Deadline):
			t.Errorf("e2e: the launcher did not stop within %v\nstderr:\n%s", Deadline, l.Stderr)
		}
	})
	return l
}

// Run is Start, then Wait.
func Run(t testing.TB, d launcher.Deps, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	l := Start(t, d, args...)
	code = l.Wait(t)
	return l.Stdout.String(), l.Stderr.String(), code
}

// StartLauncher starts an in-process launcher with the cluster's
// SSHFlags before args (a later -i or --known-hosts in args wins).
func (c *Cluster) StartLauncher(t testing.TB, args ...string) *Launch {
	t.Helper()
	return Start(t, launcher.Deps{}, append(c.SSHFlags(), args...)...)
}

// RunLauncher runs the launcher in-process against the cluster (as
// StartLauncher) and returns its output and exit code.
func (c *Cluster) RunLauncher(t testing.TB, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	l := c.StartLauncher(t, args...)
	code = l.Wait(t)
	return l.Stdout.String(), l.Stderr.String(), code
}

// Signal delivers sig to the launcher as cmd/launcher's signal handler
// would.
func (l *Launch) Signal(sig os.Signal) {
	select {
	case l.sigs <- sig:
	default:
	}
}

// Done is closed when launcher.Main has returned.
func (l *Launch) Done() <-chan struct{} { return l.done }

// Code is the exit code; valid after Done.
func (l *Launch) Code() int { <-l.done; return l.code }

// Wait waits up to Deadline for the launcher and returns its exit code;
// it fails the test at the deadline.
func (l *Launch) Wait(t testing.TB) int {
	t.Helper()
	select {
	case <-l.done:
		return l.code
	case <-time.After(Deadline):
		t.Fatalf("e2e: the launcher did not finish within %v\nstdout:\n%s\nstderr:\n%s", Deadline, l.Stdout, l.Stderr)
		return -1
	}
}
