package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent"
	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/agent/sshd"
)

// loopAgents are sshd.Servers in this process, one per loopback address
// 127.0.<190+i/250>.<i%250+1>, all on loopPort; their ranks are this
// process's children.
type loopAgents struct {
	addrs  []string
	keys   sshtest.Keys
	kh     string
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func loopAddr(i int) string { return fmt.Sprintf("127.0.%d.%d", loopSubnet+i/250, i%250+1) }

// startLoopAgents starts n in-process agents. stop ends them, with every
// session and rank.
func startLoopAgents(ctx context.Context, n int, dir string) (*loopAgents, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	keys, err := sshtest.GenKeys(dir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	la := &loopAgents{keys: keys, cancel: cancel}
	for i := range n {
		addr := loopAddr(i)
		l, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(loopPort)))
		if err != nil {
			la.stop()
			return nil, fmt.Errorf("agent %d: %w", i, err)
		}
		a := &agent.Agent{Name: "l" + strconv.Itoa(i), Version: "gwbench", Log: zap.NewNop()}
		srv := &sshd.Server{
			Subsystem:      a.ServeLogin,
			Log:            zap.NewNop(),
			HostKey:        keys.HostSigner,
			AuthorizedKeys: keys.AuthorizedKeys,
		}
		la.wg.Go(func() { _ = srv.Serve(ctx, l) })
		la.addrs = append(la.addrs, addr)
	}
	if la.kh, err = keys.WriteKnownHosts(la.addrs, loopPort); err != nil {
		la.stop()
		return nil, err
	}
	return la, nil
}

func (la *loopAgents) stop() {
	la.cancel()
	la.wg.Wait()
}

// hostfile writes an Open MPI hostfile of the first n agents, one slot each.
func (la *loopAgents) hostfile(n int) (string, error) {
	var s strings.Builder
	for _, a := range la.addrs[:n] {
		fmt.Fprintf(&s, "%s slots=1\n", a)
	}
	path := filepath.Join(la.keys.Dir, fmt.Sprintf("hosts-%d", n))
	return path, os.WriteFile(path, []byte(s.String()), 0o644)
}

func (la *loopAgents) args(hf string) []string {
	return []string{"-i", la.keys.ClientKey, "--known-hosts", la.kh, "-p", strconv.Itoa(loopPort), "-hostfile", hf}
}

// scaleCounts are the agent counts of scenario 4.
func (b *bench) scaleCounts() []int {
	if b.o.quick {
		return []int{64, 256}
	}
	return []int{256, 1024}
}

// scale is scenario 4: launch time of /bin/true x 1 on 256 and 1024
// in-process agents on loopback addresses, interleaved, with the
// launcher's CPU time and peak resident size.
func (b *bench) scale(ctx context.Context) error {
	counts := b.scaleCounts()
	t0 := time.Now()
	la, err := startLoopAgents(ctx, counts[len(counts)-1], filepath.Join(b.dir, "loop"))
	if err != nil {
		return err
	}
	defer la.stop()
	b.progress("scale: %d in-process agents on 127.0.%d-%d.x:%d in %v", len(la.addrs), loopSubnet, loopSubnet+(len(la.addrs)-1)/250, loopPort, time.Since(t0).Round(time.Millisecond))
	var cs []contender
	var cpu, rss []*Result
	for _, n := range counts {
		hf, err := la.hostfile(n)
		if err != nil {
			return err
		}
		c := &Result{Scenario: "scale", Case: fmt.Sprintf("%d agents on loopback x 1 /bin/true", n), Metric: "launcher CPU (user+sys)", Unit: "ms", Launcher: lGangway, Kind: Info}
		m := &Result{Scenario: "scale", Case: c.Case, Metric: "launcher peak RSS (VmHWM)", Unit: "MiB", Launcher: lGangway, Kind: Info, Note: "/proc/PID/status polled every 10 ms"}
		cpu, rss = append(cpu, c), append(rss, m)
		cs = append(cs, contender{
			name: fmt.Sprintf("%s @%d", lGangway, n), kind: Ours, timeout: 5 * time.Minute, hwm: true,
			argv: append(append([]string{b.bins.launcher}, la.args(hf)...), "/bin/true"),
			after: func(o outcome) {
				c.Values = append(c.Values, ms(o.CPU))
				m.Values = append(m.Values, o.HWM)
			},
		})
	}
	res := b.interleave(ctx, caseSpec{scenario: "scale", name: "loopback agents", unit: "ms"}, cs)
	for i, r := range res {
		r.Case, r.Launcher = cpu[i].Case, lGangway
		r.Note = joinNote(r.Note, "agents in gwbench's process (ranks forked by it); all on the same 2 CPUs")
		b.add(cpu[i])
		b.add(rss[i])
	}
	return nil
}
