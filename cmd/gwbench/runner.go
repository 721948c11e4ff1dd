package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
	"github.com/gangway-hpc/gangway/internal/osproc"
)

// cmdSpec is one command to time.
type cmdSpec struct {
	argv    []string
	env     []string // added to gwbench's environment
	stdout  *os.File // nil: /dev/null (or captured)
	capture bool     // keep the last 1 MiB of stdout in outcome.Stdout
	hwm     bool     // poll the process's VmHWM and CPU (outcome.HWM, outcome.CPUTrace)
	exitOK  bool     // a non-zero exit status is no error (outcome.Code has it)
	errMax  int      // how much of stderr's end outcome.Stderr keeps; 0: 8 KiB
	timeout time.Duration
	// watch, when set, is called with the process's pid once it has
	// started; runTimed calls what it returns once the process is gone.
	watch func(pid int) (end func())
}

// outcome is one timed run.
type outcome struct {
	Took time.Duration
	End  time.Time // when Wait returned: the process exited and its output was drained
	Code int
	CPU  time.Duration // user+system time of the process and the children it reaped
	HWM  float64       // with cmdSpec.hwm: the last VmHWM read from /proc/PID/status, MiB
	// CPUTrace, with cmdSpec.hwm, is the process's own user+system time
	// as it grew, read every 10 ms (cpuAt).
	CPUTrace []cpuSample
	// Not ru_maxrss: exec keeps the forking process's high-water mark in
	// it, and gwbench (with 1024 in-process agents) is far larger than
	// the launcher.
	Stdout string // with cmdSpec.capture: the last 1 MiB of stdout
	Stderr string // the end of stderr (cmdSpec.errMax)
	Err    error  // could not run, timed out, or exit code not 0
}

// runTimed runs s in its own process group from the root namespace and
// times it from start to exit. Whatever is left of its group afterwards
// is killed, so no run leaks into the next.
func runTimed(ctx context.Context, s cmdSpec) outcome {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.argv[0], s.argv[1:]...)
	cmd.Env = append(os.Environ(), s.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return osproc.KillGroup(cmd.Process.Pid, syscall.SIGKILL) } // no grace
	cmd.WaitDelay = 5 * time.Second
	outTail := testbed.Tail{Max: 1 << 20}
	switch {
	case s.stdout != nil:
		cmd.Stdout = s.stdout
	case s.capture:
		cmd.Stdout = &outTail
	default:
		null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return outcome{Err: err}
		}
		defer null.Close()
		cmd.Stdout = null
	}
	errTail := testbed.Tail{Max: cmp.Or(s.errMax, 8<<10)}
	cmd.Stderr = &errTail
	t0 := time.Now()
	err := cmd.Start()
	if err != nil {
		return outcome{Err: fmt.Errorf("start %s: %w", s.argv[0], err)}
	}
	hwm := make(chan procPoll, 1)
	stop := make(chan struct{})
	if s.hwm {
		go pollProc(cmd.Process.Pid, stop, hwm)
	} else {
		hwm <- procPoll{}
	}
	endWatch := func() {}
	if s.watch != nil {
		endWatch = s.watch(cmd.Process.Pid)
	}
	err = cmd.Wait()
	end := time.Now()
	close(stop)
	endWatch()
	polled := <-hwm
	o := outcome{HWM: polled.hwm, CPUTrace: polled.cpu, Took: end.Sub(t0), End: end, Stdout: outTail.String(), Stderr: errTail.String()}
	_ = osproc.KillGroup(cmd.Process.Pid, syscall.SIGKILL)
	if st := cmd.ProcessState; st != nil {
		o.Code, _, _ = osproc.ProcessExitCode(st)
		o.CPU = st.UserTime() + st.SystemTime()
	}
	switch {
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		o.Err = fmt.Errorf("%s: still running after %v, killed", s.argv[0], s.timeout)
	case ctx.Err() != nil:
		o.Err = ctx.Err()
	case err != nil && !(s.exitOK && exited(err)):
		o.Err = fmt.Errorf("%s: %w", s.argv[0], err)
	}
	if o.Err != nil && o.Stderr != "" {
		o.Err = fmt.Errorf("%w; stderr: %s", o.Err, lastLines(o.Stderr, 6))
	}
	return o
}

// exited reports whether err is a process's exit with a status (not a
// death by signal, not a failure to wait).
func exited(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.Exited()
}

// procPoll is what pollProc read of a process.
type procPoll struct {
	hwm float64     // the last VmHWM, MiB (the mark only grows)
	cpu []cpuSample // user+system time, a sample each time it grew
}

// cpuSample is a process's own user+system time read at one moment.
type cpuSample struct {
	At  time.Time
	CPU time.Duration
}

// cpuAt is the process's CPU at t by its trace: the last sample read at
// or before t, 0 before the first.
func cpuAt(trace []cpuSample, t time.Time) time.Duration {
	i := sort.Search(len(trace), func(i int) bool { return trace[i].At.After(t) })
	if i == 0 {
		return 0
	}
	return trace[i-1].CPU
}

// pollProc reads pid's VmHWM and CPU every 10 ms until stop is closed,
// and sends what it read.
func pollProc(pid int, stop <-chan struct{}, out chan<- procPoll) {
	var p procPoll
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if st, err := procStatus(pid); err == nil && st["VmHWM"] > p.hwm {
			p.hwm = st["VmHWM"]
		}
		if self, _ := cpuTimes([]int{pid}); self > 0 {
			c := time.Duration(self) * clockTick
			if n := len(p.cpu); n == 0 || c > p.cpu[n-1].CPU {
				p.cpu = append(p.cpu, cpuSample{At: time.Now(), CPU: c})
			}
		}
		select {
		case <-stop:
			out <- p
			return
		case <-t.C:
		}
	}
}

// lastLines returns the last n lines of s on one line, " | " between them.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
