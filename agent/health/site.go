package health

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/osproc"
)

// SiteOptions say how the site's check command runs: as whom, with what
// environment, where.
type SiteOptions struct {
	// Credential runs the command as the job's user; nil runs it as the
	// agent's own.
	Credential *syscall.Credential
	// Env is its environment: what ranks start from, the user's identity
	// and GANGWAY_HOST.
	Env []string
	// Dir is its working directory (the user's home); "" the agent's.
	Dir string
}

// RunSite runs command with /bin/sh -c in a process group of its own,
// under opts, and waits at most timeout for it; past that, or when ctx
// ends, the whole group is killed. Its stdout and stderr, together, are
// kept bounded (wire.MaxCheckOutput: the start and the end).
func RunSite(ctx context.Context, command string, timeout time.Duration, opts SiteOptions) SiteResult {
	res := SiteResult{Command: command}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := &boundedBuffer{max: wire.MaxCheckOutput - markRoom, keepTail: true}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.Env, cmd.Dir = opts.Env, opts.Dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr(opts.Credential)
	cmd.Cancel = func() error { return osproc.KillGroup(cmd.Process.Pid, syscall.SIGKILL) }
	// A grandchild that keeps the output pipe open is not waited for
	// past this.
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if cmd.Process != nil {
		// Whatever the command left behind in its group goes with it.
		_ = osproc.KillGroup(cmd.Process.Pid, syscall.SIGKILL)
	}
	res.Output = out.String()
	var ee *exec.ExitError
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		res.TimedOut = timeout
	case ctx.Err() != nil:
		res.Err = fmt.Errorf("stopped: %w", context.Cause(ctx))
	case errors.As(err, &ee):
		code, _, ok := osproc.ProcessExitCode(ee.ProcessState)
		if !ok {
			res.Err = err
		}
		res.Code = code
	case err != nil && !errors.Is(err, exec.ErrWaitDelay):
		res.Err = err
	}
	return res
}

// boundedBuffer keeps at most max bytes of what is written to it: all of
// it while it fits, then (keepTail) the first and the last halves with a
// line saying how much was left out between them (at most markRoom
// bytes more), or only the start.
type boundedBuffer struct {
	max      int
	keepTail bool

	mu      sync.Mutex
	head    []byte
	tail    []byte
	dropped int64
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	half := b.max / 2
	if !b.keepTail {
		half = b.max
	}
	if room := half - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	if !b.keepTail {
		b.dropped += int64(len(p))
		return n, nil
	}
	b.tail = append(b.tail, p...)
	if over := len(b.tail) - (b.max - half); over > 0 {
		b.dropped += int64(over)
		b.tail = append(b.tail[:0], b.tail[over:]...)
	}
	return n, nil
}

// String is what was kept; a gap in the middle is marked.
func (b *boundedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := string(b.head)
	if b.dropped > 0 && b.keepTail {
		s += fmt.Sprintf("\n[... %d bytes left out ...]\n", b.dropped) + string(b.tail)
	} else {
		s += string(b.tail)
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// Bytes is what was kept, without marks.
func (b *boundedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append(append([]byte(nil), b.head...), b.tail...)
}

// markRoom is the most String's mark adds to a boundedBuffer's max.
const markRoom = 64
