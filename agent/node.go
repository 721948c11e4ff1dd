package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"gangway/agent/wire"
)

// prepareNode does node preparation: sync, then drop page caches through
// drop_caches under the agent's SysRoot (Facts.SysRoot).
func (a *Agent) prepareNode(p wire.Prepare) wire.Prepared {
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
	syscall.Sync()
	if err := os.WriteFile(a.Facts.Path("proc", "sys", "vm", "drop_caches"), []byte(strconv.Itoa(p.DropCaches)), 0); err != nil {
		return wire.Prepared{Err: fmt.Sprintf("drop caches: %v", err)}
	}
	return wire.Prepared{Took: time.Since(t0)}
}

// probe dials every target concurrently (the reachability preflight).
func probe(ctx context.Context, p wire.Probe) wire.ProbeResult {
	if p.Timeout <= 0 {
		p.Timeout = 5 * time.Second
	}
	res := wire.ProbeResult{Results: make([]wire.ProbeOne, len(p.Targets))}
	var wg sync.WaitGroup
	for i, t := range p.Targets {
		wg.Go(func() {
			t0 := time.Now()
			d := net.Dialer{Timeout: p.Timeout}
			c, err := d.DialContext(ctx, "tcp", t)
			one := wire.ProbeOne{Target: t, Took: time.Since(t0)}
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					one.Err = "timeout after " + p.Timeout.String()
				} else {
					one.Err = err.Error()
				}
			} else {
				c.Close()
			}
			res.Results[i] = one
		})
	}
	wg.Wait()
	return res
}
