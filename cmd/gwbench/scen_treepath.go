package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/jobcert"
)

// treepathBarriers is how many barriers each rank times in treepath.
const treepathBarriers = 200

// treepath is the agent tree's critical path, part by part, on loopback
// agents: a relay's login to a child (job certificate, against the
// user's own key), a fence's round trip through 0, 1 and 2 relays (PMI
// barriers of one rank per host, chained with --tree-width 1, against
// the same hosts flat), and a barrier of 32 hosts flat and through
// widths 4 and 2, with the launcher's CPU per host and barrier.
func (b *bench) treepath(ctx context.Context) error {
	rank, err := b.buildTreeRank(ctx)
	if err != nil {
		return err
	}
	const hosts = 32
	la, err := startLoopAgents(ctx, hosts, 1, filepath.Join(b.dir, "treepath"))
	if err != nil {
		return err
	}
	defer la.stop()
	if err := b.treeLogin(ctx, la); err != nil {
		return err
	}
	b.treeHops(ctx, la, rank)
	return ctx.Err()
}

// treeLogin times a relay's login to a child as the relay makes it: TCP
// connect, SSH handshake, public-key auth with a job certificate, a
// session with the gangway subsystem; the same with the user's key
// beside it. CPU per login is the client's (gwbench's own process, which
// does nothing else meanwhile) and the agent's (its worker's).
func (b *bench) treeLogin(ctx context.Context, la *loopAgents) error {
	u, err := user.Current()
	if err != nil {
		return err
	}
	bundle, err := jobcert.New(rand.Reader, []ssh.Signer{la.keys.ClientSigner}, jobcert.Spec{
		User: u.Username, JobID: "gwbench", Relay: "gwbench", Sources: []string{"127.0.0.0/8"}, Lifetime: time.Hour})
	if err != nil {
		return err
	}
	certs, err := bundle.Signers()
	if err != nil {
		return err
	}
	iters := 100
	if b.o.quick {
		iters = 40
	}
	addr := net.JoinHostPort(la.addrs[0], strconv.Itoa(loopPort))
	for _, c := range []struct {
		name   string
		signer ssh.Signer
	}{{"job certificate", certs[0]}, {"the user's key", la.keys.ClientSigner}} {
		cfg := &ssh.ClientConfig{User: u.Username, Auth: []ssh.AuthMethod{ssh.PublicKeys(c.signer)},
			HostKeyCallback: ssh.FixedHostKey(la.keys.HostSigner.PublicKey()), Timeout: 10 * time.Second}
		cas := "a relay's login to a child on loopback (TCP, SSH handshake, " + c.name + ", gangway subsystem)"
		var took []float64
		self0, agents0 := selfCPU(), la.cpu()
		for range iters {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			t0 := time.Now()
			if err := login(ctx, addr, cfg); err != nil {
				return fmt.Errorf("login to %s with the %s: %w", addr, c.name, err)
			}
			took = append(took, float64(time.Since(t0).Microseconds()))
		}
		client, server := ms(selfCPU()-self0)/float64(iters), ms(la.cpu()-agents0)/float64(iters)
		b.add(&Result{Scenario: "treepath", Case: cas, Metric: "wall", Unit: "us", Launcher: lGangway, Kind: Info, Values: took,
			Note: fmt.Sprintf("%d logins one after another; CPU per login: client (relay) %.2f ms, agent %.2f ms (10 ms ticks over all)", iters, client, server)})
		b.add(&Result{Scenario: "treepath", Case: cas, Metric: "CPU per login, client + agent", Unit: "ms", Launcher: lGangway, Kind: Info, Values: []float64{client + server}})
	}
	return nil
}

// login is one relay login; the session is closed at once.
func login(ctx context.Context, addr string, cfg *ssh.ClientConfig) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if err != nil {
		conn.Close()
		return err
	}
	cl := ssh.NewClient(c, chans, reqs)
	defer cl.Close()
	s, err := cl.NewSession()
	if err != nil {
		return err
	}
	defer s.Close()
	return s.RequestSubsystem(wire.Subsystem)
}

// selfCPU is this process's user+system time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// treeHop is one treepath job: hosts agents, one rank each, at width.
type treeHop struct {
	hosts, width, barriers int
	cas                    string
}

// treeHops runs the fence round trips and the 32-host barriers.
func (b *bench) treeHops(ctx context.Context, la *loopAgents, rank string) {
	chain := func(n int) string {
		return fmt.Sprintf("%d hosts x 1 rank, chain (--tree-width 1): the last host behind %d relays", n, n-1)
	}
	flat := func(n int) string { return fmt.Sprintf("%d hosts x 1 rank, flat", n) }
	groups := [][]treeHop{
		{
			{1, 0, treepathBarriers, flat(1)},
			{2, 0, treepathBarriers, flat(2)},
			{2, 1, treepathBarriers, chain(2)},
			{3, 0, treepathBarriers, flat(3)},
			{3, 1, treepathBarriers, chain(3)},
		},
		{
			{32, 0, treepathBarriers, flat(32)},
			{32, 4, treepathBarriers, "32 hosts x 1 rank, --tree-width 4 (depth 3)"},
			{32, 2, treepathBarriers, "32 hosts x 1 rank, --tree-width 2 (depth 5)"},
			{32, 0, 0, "32 hosts x 1 rank, flat, no timed barriers"},
			{32, 4, 0, "32 hosts x 1 rank, --tree-width 4, no timed barriers"},
		},
	}
	for _, g := range groups {
		var cs []contender
		var extra [][]*Result
		for _, h := range g {
			hf, err := la.hostfile(h.hosts, 1)
			if err != nil {
				b.skip("treepath: %v", err)
				return
			}
			started := &Result{Scenario: "treepath", Case: h.cas, Metric: "all ranks started", Unit: "ms", Launcher: lGangway, Kind: Info}
			cpu := &Result{Scenario: "treepath", Case: h.cas, Metric: "launcher CPU (user+sys)", Unit: "ms", Launcher: lGangway, Kind: Info}
			extra = append(extra, []*Result{started, cpu})
			var last float64
			argv := append([]string{b.bins.launcher}, la.args(hf)...)
			argv = append(argv, "--tree-width", strconv.Itoa(h.width), rank, strconv.Itoa(h.barriers))
			cs = append(cs, contender{name: h.cas, kind: Info, argv: argv, capture: true, timeout: time.Minute,
				value: func(o outcome) (float64, error) {
					tr, err := parseTreeRun(o.Stdout, h.hosts)
					if err != nil {
						return 0, err
					}
					last = float64(tr.lastStart-o.End.Add(-o.Took).UnixNano()) / 1e6
					if h.barriers == 0 {
						return ms(o.Took), nil
					}
					return float64(tr.barrierMax) / 1e3, nil
				},
				after: func(o outcome) {
					started.Values = append(started.Values, last)
					cpu.Values = append(cpu.Values, ms(o.CPU))
				},
			})
		}
		res := b.interleave(ctx, caseSpec{scenario: "treepath", name: "hops", metric: fmt.Sprintf("PMI barrier (each rank's median of %d, max over ranks)", treepathBarriers), unit: "us"}, cs)
		for i, r := range res {
			r.Case, r.Launcher = cs[i].name, lGangway
			if g[i].barriers == 0 {
				r.Metric, r.Unit = "launcher wall", "ms"
			}
			for _, x := range extra[i] {
				b.add(x)
			}
		}
		if ctx.Err() != nil {
			return
		}
	}
}
