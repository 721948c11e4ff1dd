package engine

import (
	"context"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// notifyPipe is a host's stream that says when messages wait
// (transport.Notifier), as a host of the agent tree does: the launcher
// writes to toAgent, the agent's frames come from fromAgent, and the
// test calls tell once it has written them.
type notifyPipe struct {
	fromAgent *io.PipeReader
	toAgent   *io.PipeWriter
	mu        sync.Mutex
	ready     func()
}

func (p *notifyPipe) Read(b []byte) (int, error)  { return p.fromAgent.Read(b) }
func (p *notifyPipe) Write(b []byte) (int, error) { return p.toAgent.Write(b) }
func (p *notifyPipe) Close() error {
	p.fromAgent.Close()
	p.toAgent.Close()
	p.tell()
	return nil
}
func (p *notifyPipe) Notify(ready func()) {
	p.mu.Lock()
	p.ready = ready
	p.mu.Unlock()
}
func (p *notifyPipe) tell() {
	p.mu.Lock()
	ready := p.ready
	p.mu.Unlock()
	if ready != nil {
		ready()
	}
}

// dialGoroutines are the goroutines in one of the dial's functions.
func dialGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "engine.(*retry).run") || strings.Contains(g, "engine.takeFacts") {
			n++
		}
	}
	return n
}

// TestDialFactsLater: a host whose stream says when messages wait holds
// no goroutine of the dial while it builds its facts; once they are in,
// the dial goes on and the launch has its session.
func TestDialFactsLater(t *testing.T) {
	launcherR, agentW := io.Pipe()
	agentR, launcherW := io.Pipe()
	p := &notifyPipe{fromAgent: launcherR, toAgent: launcherW}
	d := transport.DialerFunc(func(context.Context, hostfile.Host) (io.ReadWriteCloser, string, error) {
		return p, "198.18.0.2", nil
	})
	hosts := []hostfile.Host{{Name: "node1"}}
	hello := func(int, map[string]string) wire.Hello { return wire.Hello{Version: wire.Version, Host: "node1"} }
	type result struct {
		ss  []*session
		err error
	}
	res := make(chan result, 1)
	go func() {
		ss, err := dialAll(context.Background(), zap.NewNop(), nil, hosts, transport.Dialers{Remote: d}, hello, dialWait{timeout: 10 * time.Second})
		res <- result{ss, err}
	}()
	agent := wire.NewConn(struct {
		io.Reader
		io.WriteCloser
	}{agentR, agentW})
	if m, err := agent.Recv(); err != nil || m.Kind != wire.KindHello {
		t.Fatalf("agent got %v, %v; want the Hello", m.Kind, err)
	}
	// The facts are not in: no goroutine of the dial waits for them.
	deadline := time.Now().Add(5 * time.Second)
	for dialGoroutines() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of the dial wait for the facts", dialGoroutines())
		}
		time.Sleep(10 * time.Millisecond)
	}
	go p.tell() // as the relay's envelope would: a message waits
	if err := agent.Send(wire.KindFacts, wire.Facts{Version: wire.Version, Name: "node1", CPUs: 8}); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.ss) != 1 || r.ss[0] == nil || r.ss[0].facts.CPUs != 8 || r.ss[0].addr != "198.18.0.2" {
		t.Fatalf("sessions %+v", r.ss)
	}
	r.ss[0].close()
}
