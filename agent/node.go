package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gangway-hpc/gangway/agent/account"
	"github.com/gangway-hpc/gangway/agent/wire"
)

// prepareNode does node preparation: sync, then drop page caches through
// drop_caches under the agent's SysRoot (Facts.SysRoot).
func (a *Agent) prepareNode(p wire.Prepare, login account.Login) wire.Prepared {
	t0 := time.Now()
	if p.DropCaches == 0 {
		return wire.Prepared{}
	}
	if p.DropCaches < 1 || p.DropCaches > 3 {
		return wire.Prepared{Err: fmt.Sprintf("drop_caches %d: want 1, 2 or 3", p.DropCaches)}
	}
	if !a.AllowDropCaches {
		return wire.Prepared{Err: "this agent does not allow dropping caches (start it with --allow-drop-caches, as root)"}
	}
	if login.NoDropCaches != "" {
		return wire.Prepared{Err: login.NoDropCaches}
	}
	syscall.Sync()
	if err := os.WriteFile(a.Facts.Path("proc", "sys", "vm", "drop_caches"), []byte(strconv.Itoa(p.DropCaches)), 0); err != nil {
		return wire.Prepared{Err: fmt.Sprintf("drop caches: %v", err)}
	}
	return wire.Prepared{Took: time.Since(t0)}
}

// maxProbeDials is how many dials a probe has in flight at once: a
// launcher asks each host for at most 31 targets, and a longer list must
// not use up the agent's file descriptors.
const maxProbeDials = 32

// probe dials the targets concurrently, maxProbeDials at a time (the
// reachability preflight).
func probe(ctx context.Context, p wire.Probe) wire.ProbeResult {
	if p.Timeout <= 0 {
		p.Timeout = 5 * time.Second
	}
	res := wire.ProbeResult{Results: make([]wire.ProbeOne, len(p.Targets))}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(p.Targets), maxProbeDials) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(p.Targets); i = int(next.Add(1) - 1) {
				res.Results[i] = dial(ctx, p.Targets[i], p.Timeout)
			}
		})
	}
	wg.Wait()
	return res
}

// dial is one target's dial.
func dial(ctx context.Context, target string, timeout time.Duration) wire.ProbeOne {
	t0 := time.Now()
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", target)
	one := wire.ProbeOne{Target: target, Took: time.Since(t0)}
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			one.Err = "timeout after " + timeout.String()
		} else {
			one.Err = err.Error()
		}
	} else {
		c.Close()
	}
	return one
}

// ProbeListener accepts TCP connections on every address of this host
// and closes each at once: the target of other hosts' preflight probes
// (Facts.ProbePort) for an agent without a listener of its own, one
// started for a single job over ssh (--stdio). A probe then costs the
// probed host an accept and a close instead of a forked sshd.
type ProbeListener struct {
	ln   net.Listener
	done chan struct{}
}

// ListenProbes starts a ProbeListener on an ephemeral port; Close stops it.
func ListenProbes() (*ProbeListener, error) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return nil, fmt.Errorf("probe listener: %w", err)
	}
	p := &ProbeListener{ln: ln, done: make(chan struct{})}
	go p.serve()
	return p, nil
}

// Port is the listener's port.
func (p *ProbeListener) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *ProbeListener) serve() {
	defer close(p.done)
	for {
		c, err := p.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			time.Sleep(10 * time.Millisecond) // out of fds, say: let them free
			continue
		}
		c.Close()
	}
}

// Close stops the listener and waits for its goroutine.
func (p *ProbeListener) Close() error {
	err := p.ln.Close()
	<-p.done
	return err
}
