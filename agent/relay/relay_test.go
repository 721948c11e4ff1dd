package relay_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/account"
	"github.com/gangway-hpc/gangway/agent/agenttest"
	"github.com/gangway-hpc/gangway/agent/relay"
	"github.com/gangway-hpc/gangway/agent/sshd"
	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/jobcert"
)

// upstream records what a relay sends toward the launcher.
type upstream struct {
	mu   sync.Mutex
	msgs []wire.Msg
	more chan struct{}
}

func newUpstream() *upstream { return &upstream{more: make(chan struct{}, 1)} }

func (u *upstream) add(m wire.Msg) {
	u.mu.Lock()
	u.msgs = append(u.msgs, m)
	u.mu.Unlock()
	select {
	case u.more <- struct{}{}:
	default:
	}
}

func (u *upstream) Send(k wire.Kind, v any) error {
	e, err := wire.Encode(k, v)
	if err != nil {
		return err
	}
	u.add(wire.Msg{Kind: k, Payload: append([]byte(nil), e.Payload()...)})
	return nil
}

func (u *upstream) SendEnvelope(k wire.Kind, host int, inner wire.Kind, p []byte) error {
	u.add(wire.Msg{Kind: k, Payload: wire.AppendEnvelope(nil, host, inner, p)})
	return nil
}

// wait returns the first message after skip that match says is the one.
func (u *upstream) wait(t *testing.T, match func(wire.Msg) bool) wire.Msg {
	t.Helper()
	deadline := time.After(agenttest.Deadline)
	seen := 0
	for {
		u.mu.Lock()
		msgs := u.msgs[seen:]
		seen = len(u.msgs)
		u.mu.Unlock()
		for _, m := range msgs {
			if match(m) {
				return m
			}
		}
		select {
		case <-u.more:
		case <-deadline:
			t.Fatalf("no such message from the relay within %v", agenttest.Deadline)
		}
	}
}

func kindIs(k wire.Kind) func(wire.Msg) bool { return func(m wire.Msg) bool { return m.Kind == k } }

// key is a job certificate from the cluster's client key, valid from
// loopback.
func key(t *testing.T, c *agenttest.Cluster, sources ...string) wire.RelayKey {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	if sources == nil {
		sources = []string{"127.0.0.0/8"}
	}
	b, err := jobcert.New(rand.Reader, []ssh.Signer{c.Keys.ClientSigner}, jobcert.Spec{User: u.Username, JobID: "relaytest", Relay: "r", Sources: sources, Lifetime: time.Hour, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return wire.RelayKey{Key: b.Key, Certs: b.Certs}
}

func link(t *testing.T, host int, addr string) wire.Link {
	u, _ := user.Current()
	return wire.Link{Host: host, Name: "child", Addr: addr, User: u.Username, TimeoutMS: 10000, KeepaliveMS: 200, KeepaliveTimeoutMS: 2000}
}

func linked(t *testing.T, up *upstream, host int) wire.Linked {
	t.Helper()
	m := up.wait(t, func(m wire.Msg) bool {
		var l wire.Linked
		return m.Kind == wire.KindLinked && m.Decode(&l) == nil && l.Host == host
	})
	var l wire.Linked
	_ = m.Decode(&l)
	return l
}

// TestRelayForwards: a relay logs in to a real agent with the job
// certificate, reports the agent's host key, carries a Hello down and
// the agent's Facts up in an envelope, and its Close ends the child's
// session.
func TestRelayForwards(t *testing.T) {
	c := agenttest.StartLocal(t, 1)
	up := newUpstream()
	r := relay.New(t.Context(), up, zaptest.NewLogger(t))
	defer r.Close()
	if err := r.Link(link(t, 5, c.Hosts[0].HostPort())); err == nil || !strings.Contains(err.Error(), "before the relay's key") {
		t.Fatalf("a link before the key: %v", err)
	}
	if err := r.SetKey(key(t, c)); err != nil {
		t.Fatal(err)
	}
	if err := r.Link(link(t, 5, c.Hosts[0].HostPort())); err != nil {
		t.Fatal(err)
	}
	l := linked(t, up, 5)
	if l.Err != "" {
		t.Fatalf("linked: %+v", l)
	}
	if hk, err := ssh.ParsePublicKey(l.HostKey); err != nil || string(hk.Marshal()) != string(c.Hosts[0].HostPub.Marshal()) {
		t.Errorf("host key %v, want the agent's", err)
	}
	if err := r.Link(link(t, 5, c.Hosts[0].HostPort())); err == nil {
		t.Error("a second link of host 5 accepted")
	}
	hello, _ := wire.Encode(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "relaytest", Host: c.Hosts[0].Name})
	if err := r.Forward(wire.Msg{Kind: wire.KindRelay, Payload: wire.AppendEnvelope(nil, 5, wire.KindHello, hello.Payload())}); err != nil {
		t.Fatal(err)
	}
	m := up.wait(t, kindIs(wire.KindRelayed))
	host, inner, err := m.Envelope()
	if err != nil || host != 5 || inner.Kind != wire.KindFacts {
		t.Fatalf("up: host %d %s %v", host, inner.Kind, err)
	}
	var f wire.Facts
	if err := inner.Decode(&f); err != nil || f.Version != wire.Version {
		t.Fatalf("facts %+v %v", f, err)
	}
	r.Close()
	// Forwarding after Close is quietly dropped; nothing panics.
	_ = r.Forward(wire.Msg{Kind: wire.KindRelay, Payload: wire.AppendEnvelope(nil, 5, wire.KindPing, nil)})
}

// TestRelayLinkFailures: what a relay says when it cannot reach a child:
// nothing listens (refused), the child refuses the certificate (from an
// address it does not allow), a name that does not resolve.
func TestRelayLinkFailures(t *testing.T) {
	c := agenttest.StartLocal(t, 1)
	addr, port := c.Unused(t)
	cases := []struct {
		name string
		key  wire.RelayKey
		addr string
		want func(wire.Linked) bool
	}{
		{"refused", key(t, c), net.JoinHostPort(addr, strconv.Itoa(port)), func(l wire.Linked) bool { return l.Dial == wire.DialRefused }},
		{"source not allowed", key(t, c, "198.18.0.1"), c.Hosts[0].HostPort(), func(l wire.Linked) bool { return l.Refused }},
		{"no such host", key(t, c), "gw-no-such-host.invalid:22122", func(l wire.Linked) bool { return l.Dial == wire.DialNoSuchHost || l.Dial == wire.DialDNS }},
	}
	for i, cs := range cases {
		t.Run(cs.name, func(t *testing.T) {
			up := newUpstream()
			r := relay.New(t.Context(), up, zaptest.NewLogger(t))
			defer r.Close()
			if err := r.SetKey(cs.key); err != nil {
				t.Fatal(err)
			}
			if err := r.Link(link(t, i, cs.addr)); err != nil {
				t.Fatal(err)
			}
			if l := linked(t, up, i); l.Err == "" || !cs.want(l) {
				t.Errorf("linked %+v", l)
			}
		})
	}
}

// TestRelayKeyRefused: a RelayKey that is not a job certificate bundle.
func TestRelayKeyRefused(t *testing.T) {
	c := agenttest.StartLocal(t, 1)
	good := key(t, c)
	bad := map[string]wire.RelayKey{
		"no certificates": {Key: good.Key},
		"garbage key":     {Key: []byte("not a key"), Certs: good.Certs},
		"garbage cert":    {Key: good.Key, Certs: [][]byte{[]byte("junk")}},
		"plain key":       {Key: good.Key, Certs: [][]byte{c.Keys.ClientSigner.PublicKey().Marshal()}},
	}
	for name, k := range bad {
		r := relay.New(t.Context(), newUpstream(), zaptest.NewLogger(t))
		if err := r.SetKey(k); err == nil {
			t.Errorf("%s: accepted", name)
		}
		r.Close()
	}
}

// TestJobCertificateBindsJob: a session opened with a job certificate
// serves that job only: a Hello of another job is refused.
func TestJobCertificateBindsJob(t *testing.T) {
	c := agenttest.StartLocal(t, 1)
	up := newUpstream()
	r := relay.New(t.Context(), up, zaptest.NewLogger(t))
	defer r.Close()
	if err := r.SetKey(key(t, c)); err != nil {
		t.Fatal(err)
	}
	if err := r.Link(link(t, 1, c.Hosts[0].HostPort())); err != nil {
		t.Fatal(err)
	}
	if l := linked(t, up, 1); l.Err != "" {
		t.Fatalf("linked: %+v", l)
	}
	hello, _ := wire.Encode(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "another", Host: c.Hosts[0].Name})
	if err := r.Forward(wire.Msg{Kind: wire.KindRelay, Payload: wire.AppendEnvelope(nil, 1, wire.KindHello, hello.Payload())}); err != nil {
		t.Fatal(err)
	}
	m := up.wait(t, kindIs(wire.KindRelayed))
	_, inner, err := m.Envelope()
	var e wire.Error
	if err != nil || inner.Kind != wire.KindError || inner.Decode(&e) != nil || !strings.Contains(e.Msg, `job certificate is for job "relaytest"`) {
		t.Fatalf("another job's hello: %s %q %v", inner.Kind, e.Msg, err)
	}
}

// TestRelayGathers: told to gather, a relay that has taken a request for
// its own host sends its own answer and each child's (from real agents,
// eight ranks each) in one Gathered frame, and nothing of them alone; a
// child that never answers is waited for at most gatherWait, then the
// rest go up; not told, each child's answer goes up alone, as before.
func TestRelayGathers(t *testing.T) {
	c := agenttest.StartLocal(t, 2)
	// relayed is a relay (its own host 0, told to gather or not) whose
	// two children (hosts 1 and 2) are linked and have said hello.
	relayed := func(t *testing.T, gather bool) (*relay.Relay, *upstream) {
		t.Helper()
		up := newUpstream()
		r := relay.New(t.Context(), up, zaptest.NewLogger(t))
		t.Cleanup(r.Close)
		if err := r.SetKey(key(t, c)); err != nil {
			t.Fatal(err)
		}
		r.SetGather(gather)
		for i, h := range c.Hosts {
			if err := r.Link(link(t, i+1, h.HostPort())); err != nil {
				t.Fatal(err)
			}
			if l := linked(t, up, i+1); l.Err != "" {
				t.Fatalf("linked: %+v", l)
			}
			forward(t, r, i+1, wire.KindHello, wire.Hello{Version: wire.Version, JobID: "relaytest", Host: h.Name})
			up.wait(t, func(m wire.Msg) bool {
				host, in, err := m.Envelope()
				return err == nil && host == i+1 && in.Kind == wire.KindFacts
			})
		}
		return r, up
	}
	job := wire.StartJob{JobID: "relaytest", StdinRank: -1, KillGrace: time.Second}

	t.Run("gathered", func(t *testing.T) {
		// Both children must answer within the round: on a loaded
		// machine their 16 ranks may take longer than 2 s to start.
		defer relay.SetGatherWait(time.Minute)()
		r, up := relayed(t, true)
		r.Begin(wire.KindReady)
		for i := range c.Hosts {
			// Eight ranks on each child, as on a DGX host.
			j := job
			for l := range 8 {
				j.Ranks = append(j.Ranks, wire.RankSpec{Rank: 8*i + l, LocalRank: l, Argv: []string{"/bin/sh", "-c", "exit 0"}, Env: []string{"PATH=/usr/bin:/bin"}})
			}
			forward(t, r, i+1, wire.KindStart, j)
		}
		if taken, err := r.OwnAnswer(wire.KindReady, wire.Ready{Err: "own"}); !taken || err != nil {
			t.Fatalf("own answer: taken %v, %v", taken, err)
		}
		m := up.wait(t, kindIs(wire.KindGathered))
		g, err := m.Gathered()
		if err != nil || g.Kind != wire.KindReady {
			t.Fatalf("gathered %+v %v", g, err)
		}
		got := map[int]string{}
		for i, h := range g.Hosts {
			var rd wire.Ready
			if err := json.Unmarshal(g.Answers[i], &rd); err != nil {
				t.Fatal(err)
			}
			got[h] = rd.Err
		}
		if len(got) != 3 || got[0] != "own" || got[1] != "" || got[2] != "" {
			t.Errorf("answers by host %v, want the relay's own (0) and both children's", got)
		}
		// Go reaches the children spread; their Started come gathered.
		r.Begin(wire.KindStarted)
		r.Spread(wire.Msg{Kind: wire.KindSpread, Payload: wire.AppendFrame(nil, wire.KindGo, nil)})
		if taken, err := r.OwnAnswer(wire.KindStarted, wire.Started{}); !taken || err != nil {
			t.Fatalf("own started: taken %v, %v", taken, err)
		}
		g, err = up.wait(t, func(m wire.Msg) bool {
			g, err := m.Gathered()
			return err == nil && g.Kind == wire.KindStarted
		}).Gathered()
		if err != nil || !slices.Equal(sorted(g.Hosts), []int{0, 1, 2}) {
			t.Fatalf("gathered started %+v %v, want hosts 0, 1 and 2", g, err)
		}
		for i, h := range g.Hosts {
			var st wire.Started
			if err := json.Unmarshal(g.Answers[i], &st); err != nil {
				t.Fatal(err)
			}
			if want := map[int]int{0: 0, 1: 8, 2: 8}[h]; len(st.Pids) != want {
				t.Errorf("host %d's started: %d pids, want %d", h, len(st.Pids), want)
			}
		}
		up.mu.Lock()
		defer up.mu.Unlock()
		for _, m := range up.msgs {
			if _, in, err := m.Envelope(); m.Kind == wire.KindRelayed && err == nil && (in.Kind == wire.KindReady || in.Kind == wire.KindStarted) {
				t.Errorf("a child's %s went up alone as well", in.Kind)
			}
		}
	})

	t.Run("one never answers", func(t *testing.T) {
		r, up := relayed(t, true)
		r.Begin(wire.KindProbeResult)
		forward(t, r, 1, wire.KindProbe, wire.Probe{Timeout: time.Second}) // host 2 is never asked
		if taken, _ := r.OwnAnswer(wire.KindProbeResult, wire.ProbeResult{}); !taken {
			t.Fatal("own answer not taken")
		}
		g, err := up.wait(t, kindIs(wire.KindGathered)).Gathered()
		if err != nil || g.Kind != wire.KindProbeResult || !slices.Equal(sorted(g.Hosts), []int{0, 1}) {
			t.Fatalf("gathered %+v %v, want hosts 0 and 1 once host 2 was waited for", g, err)
		}
		// Later answers go up as they come.
		if taken, _ := r.OwnAnswer(wire.KindProbeResult, wire.ProbeResult{}); taken {
			t.Error("an answer after the round ended was taken")
		}
	})

	t.Run("not told", func(t *testing.T) {
		r, up := relayed(t, false)
		r.Begin(wire.KindReady)
		forward(t, r, 1, wire.KindStart, job)
		if taken, _ := r.OwnAnswer(wire.KindReady, wire.Ready{}); taken {
			t.Error("own answer taken, not told to gather")
		}
		up.wait(t, func(m wire.Msg) bool {
			host, in, err := m.Envelope()
			return err == nil && host == 1 && in.Kind == wire.KindReady
		})
	})
}

// TestRelayEnds: through a relay, real agents of eight ranks each told
// Hello.Ends: the child whose ranks all exit 0 sends nothing up alone
// (no exit, no done); the child whose rank fails has its eight exits
// passed up and then its Done; and once the relay's own host has ended,
// one Ends names the clean child.
func TestRelayEnds(t *testing.T) {
	c := agenttest.StartLocal(t, 2)
	up := newUpstream()
	r := relay.New(t.Context(), up, zaptest.NewLogger(t))
	t.Cleanup(r.Close)
	if err := r.SetKey(key(t, c)); err != nil {
		t.Fatal(err)
	}
	r.SetEnds(true)
	for i, h := range c.Hosts {
		if err := r.Link(link(t, i+1, h.HostPort())); err != nil {
			t.Fatal(err)
		}
		if l := linked(t, up, i+1); l.Err != "" {
			t.Fatalf("linked: %+v", l)
		}
		forward(t, r, i+1, wire.KindHello, wire.Hello{Version: wire.Version, JobID: "relaytest", Host: h.Name, BatchExits: true, Ends: true})
		up.wait(t, func(m wire.Msg) bool {
			host, in, err := m.Envelope()
			return err == nil && host == i+1 && in.Kind == wire.KindFacts
		})
	}
	r.OwnJob(true)
	for i := range c.Hosts {
		j := wire.StartJob{JobID: "relaytest", StdinRank: -1, KillGrace: time.Second}
		for l := range 8 {
			sh := "exit 0"
			if i == 1 && l == 2 {
				sh = "sleep 0.5; exit 3"
			}
			j.Ranks = append(j.Ranks, wire.RankSpec{Rank: 8*i + l, LocalRank: l, Argv: []string{"/bin/sh", "-c", sh}, Env: []string{"PATH=/usr/bin:/bin"}})
		}
		forward(t, r, i+1, wire.KindStart, j)
	}
	r.Spread(wire.Msg{Kind: wire.KindSpread, Payload: wire.AppendFrame(nil, wire.KindGo, nil)})
	up.wait(t, func(m wire.Msg) bool {
		host, in, err := m.Envelope()
		return err == nil && host == 2 && in.Kind == wire.KindDone
	})
	if !r.OwnEnded(true, 0) {
		t.Fatal("own end not taken")
	}
	e, err := up.wait(t, kindIs(wire.KindEnds)).Ends()
	if err != nil || !e.Self || !e.Last || !slices.Equal(e.Hosts, []int{1}) {
		t.Fatalf("ends %+v (%v), want self and host 1, last", e, err)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	codes := map[int]int{}
	for _, m := range up.msgs {
		host, in, err := m.Envelope()
		if m.Kind != wire.KindRelayed || err != nil {
			continue
		}
		switch {
		case host == 1 && (in.Kind == wire.KindExit || in.Kind == wire.KindDone || in.Kind == wire.KindEnds):
			t.Errorf("the clean child's %s went up", in.Kind)
		case host == 2 && in.Kind == wire.KindExit:
			xs, err := in.Exits()
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range xs {
				codes[x.Rank] = x.Code
			}
		case host == 2 && in.Kind == wire.KindDone && len(codes) != 8:
			t.Errorf("child 2's done after %d exits, want its 8", len(codes))
		}
	}
	if codes[10] != 3 || len(codes) != 8 {
		t.Errorf("child 2's exits %v, want its 8, rank 10's 3", codes)
	}
}

// forward sends v to child host as the launcher's envelope would.
func forward(t *testing.T, r *relay.Relay, host int, k wire.Kind, v any) {
	t.Helper()
	e, err := wire.Encode(k, v)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Forward(wire.Msg{Kind: wire.KindRelay, Payload: wire.AppendEnvelope(nil, host, k, e.Payload())}); err != nil {
		t.Fatal(err)
	}
}

func sorted(s []int) []int {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestRelayHelloFirst: a child hears nothing from its relay before the
// launcher's Hello for it, however long that Hello takes (a launcher
// checking thousands of host keys): neither the relay's heartbeat pings
// nor a spread frame go ahead of it. A child's agent ends a session
// that begins with anything but a Hello when it is of an older build,
// so the first frame the child reads must be the Hello.
func TestRelayHelloFirst(t *testing.T) {
	kinds := make(chan wire.Kind, 64)
	c := agenttest.StartLocal(t, 1, agenttest.WithServer(func(_ int, s *sshd.Server) {
		serve := s.Subsystem
		s.Subsystem = func(ctx context.Context, ch io.ReadWriteCloser, login account.Login) error {
			// What the agent reads, also decoded here, frame by frame.
			pr, pw := io.Pipe()
			defer pw.Close()
			go func() {
				conn := wire.NewConn(struct {
					io.Reader
					io.WriteCloser
				}{pr, pw})
				for {
					m, err := conn.Recv()
					if err != nil {
						return
					}
					select {
					case kinds <- m.Kind:
					default:
					}
				}
			}()
			return serve(ctx, struct {
				io.Reader
				io.Writer
				io.Closer
			}{io.TeeReader(ch, pw), ch, ch}, login)
		}
	}))
	up := newUpstream()
	r := relay.New(t.Context(), up, zaptest.NewLogger(t))
	defer r.Close()
	if err := r.SetKey(key(t, c)); err != nil {
		t.Fatal(err)
	}
	l := link(t, 3, c.Hosts[0].HostPort())
	l.HeartbeatMS = 10
	if err := r.Link(l); err != nil {
		t.Fatal(err)
	}
	if a := linked(t, up, 3); a.Err != "" {
		t.Fatalf("linked: %+v", a)
	}
	// Twenty heartbeat intervals and a spread ping before the Hello.
	time.Sleep(200 * time.Millisecond)
	r.Spread(wire.Msg{Kind: wire.KindSpread, Payload: []byte{byte(wire.KindPing), 0, 0, 0, 0}})
	hello, _ := wire.Encode(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "relaytest", Host: c.Hosts[0].Name})
	if err := r.Forward(wire.Msg{Kind: wire.KindRelay, Payload: wire.AppendEnvelope(nil, 3, wire.KindHello, hello.Payload())}); err != nil {
		t.Fatal(err)
	}
	m := up.wait(t, func(m wire.Msg) bool { return m.Kind == wire.KindRelayed || m.Kind == wire.KindCut })
	if host, inner, err := m.Envelope(); err != nil || host != 3 || inner.Kind != wire.KindFacts {
		t.Fatalf("up: %s, host %d %s %v; want the child's facts", m.Kind, host, inner.Kind, err)
	}
	select {
	case k := <-kinds:
		if k != wire.KindHello {
			t.Fatalf("the child's first frame was a %s, not the Hello", k)
		}
	case <-time.After(agenttest.Deadline):
		t.Fatal("the child read no frame")
	}
	// Once greeted, it is pinged for the launcher.
	deadline := time.After(agenttest.Deadline)
	for {
		select {
		case k := <-kinds:
			if k == wire.KindPing {
				return
			}
		case <-deadline:
			t.Fatal("no ping reached the child after its Hello")
		}
	}
}
