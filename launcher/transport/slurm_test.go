package transport

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
)

// fakeSrunEnv switches the test binary into a fake srun (fakeSrun): the
// dialer's tests run it in place of Slurm's.
const fakeSrunEnv = "GANGWAY_TEST_FAKE_SRUN"

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeSrunEnv); mode != "" {
		os.Exit(fakeSrun(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeSrun plays srun starting `agent --srun` on every node of
// --nodelist, in one process: per node an SSH server on 127.0.0.1 that
// takes only the launcher's key from the environment, prints the
// readiness line, and answers the launcher's Hello with Facts. It exits
// 0 once every session has ended, and 143 on SIGTERM (as srun cancels
// its step). Modes:
//
//	agents  as above
//	liar    the readiness lines give another host key than the servers use
//	silent  no readiness line (a step that cannot start), until SIGTERM
//	fail    srun's error for a pending allocation, exit 1
func fakeSrun(mode string, args []string) int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	var nodes []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--nodelist="); ok {
			nodes = strings.Split(v, ",")
		}
	}
	switch mode {
	case "fail":
		fmt.Fprintln(os.Stderr, "srun: error: Unable to confirm allocation for job 9: Job is pending execution")
		return 1
	case "silent":
		<-term
		fmt.Fprintln(os.Stderr, "srun: Cancelled pending job step with signal 15")
		return 1
	}
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(os.Getenv(wire.SrunKeyEnv)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake srun:", err)
		return 2
	}
	var sessions sync.WaitGroup
	for _, n := range nodes {
		hk, lie := newTestSigner(), newTestSigner()
		cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
			if string(k.Marshal()) == string(key.Marshal()) {
				return &ssh.Permissions{}, nil
			}
			return nil, errors.New("not the launcher")
		}}
		cfg.AddHostKey(hk)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake srun:", err)
			return 2
		}
		reported := hk
		if mode == "liar" {
			reported = lie
		}
		pub := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(reported.PublicKey())))
		fmt.Println("some task prolog output")
		fmt.Println(wire.SrunReady{Node: n, Addr: l.Addr().String(), HostKey: pub})
		sessions.Go(func() { fakeAgent(l, cfg, n) })
	}
	done := make(chan struct{})
	go func() { sessions.Wait(); close(done) }()
	select {
	case <-done:
		return 0
	case <-term:
		fmt.Fprintln(os.Stderr, "srun: forcing job termination")
		return 143
	}
}

// fakeAgent serves one launcher session on l: Hello, Facts, then waits
// for the launcher to close it.
func fakeAgent(l net.Listener, cfg *ssh.ServerConfig, node string) {
	defer l.Close()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
		if err != nil {
			c.Close()
			continue
		}
		go ssh.DiscardRequests(reqs)
		for nc := range chans {
			ch, creqs, err := nc.Accept()
			if err != nil {
				continue
			}
			req := <-creqs
			_ = req.Reply(req.Type == "subsystem", nil)
			go ssh.DiscardRequests(creqs)
			conn := wire.NewConn(ch)
			if m, err := conn.Recv(); err == nil && m.Kind == wire.KindHello {
				_ = conn.Send(wire.KindFacts, wire.Facts{Version: wire.Version, Name: node})
			}
			for {
				if _, err := conn.Recv(); err != nil {
					break
				}
			}
			sc.Close()
			return
		}
	}
}

func newTestSigner() ssh.Signer {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	s, _ := ssh.NewSignerFromKey(priv)
	return s
}

// fakeSrunDialer is the srun transport for hosts with the fake srun in
// mode.
func fakeSrunDialer(t *testing.T, hosts []hostfile.Host, mode string) *srunDialer {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Kind: Slurm, AgentPath: "agent", StartTimeout: time.Minute}
	d, err := newSrun(o, hosts, false, append(os.Environ(), fakeSrunEnv+"="+mode, "SLURM_JOB_ID=9"), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	d.argv[0] = exe
	return d
}

// slurmHosts are n nodes cn1, cn2, ... of 2 slots.
func slurmHosts(n int) []hostfile.Host {
	var hosts []hostfile.Host
	for i := range n {
		hosts = append(hosts, hostfile.Host{Name: fmt.Sprintf("cn%d", i+1), Slots: 2})
	}
	return hosts
}

// reached is one agent reached through the step: its stream, the address
// and agent port the dialler gave, and its Facts.
type reached struct {
	conn  *wire.Conn
	addr  string
	port  int
	facts wire.Facts
}

// dialFake reaches every host's agent through d, at once, within timeout:
// Dial, then Hello and the agent's Facts. The first error ends it.
func dialFake(t *testing.T, d *srunDialer, hosts []hostfile.Host, timeout time.Duration) ([]reached, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	out := make([]reached, len(hosts))
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() {
			rwc, addr, err := d.Dial(ctx, h)
			if err != nil {
				errs[i] = fmt.Errorf("host %s: %w", h.Name, err)
				return
			}
			c := wire.NewConn(rwc)
			if err := c.Send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "j", Host: h.Name}); err != nil {
				c.Close()
				errs[i] = err
				return
			}
			m, err := c.Recv()
			if err == nil {
				err = m.Decode(&out[i].facts)
			}
			if err != nil {
				c.Close()
				errs[i] = err
				return
			}
			out[i].conn, out[i].addr, out[i].port = c, addr, rwc.(AgentPorter).AgentPort()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, r := range out {
			if r.conn != nil {
				r.conn.Close()
			}
		}
		return nil, err
	}
	return out, nil
}

// TestSrunDialer: the step runs on the hosts given (those the plan uses),
// each once; every agent is reached at the address and with the host key
// its readiness line gave; the stream knows the agent's port (for the
// preflight); after the sessions close, srun exits by itself.
func TestSrunDialer(t *testing.T) {
	hosts := slurmHosts(2)
	d := fakeSrunDialer(t, append(hosts, hosts[0]), "agents")
	if !slices.Equal(d.nodes, []string{"cn1", "cn2"}) {
		t.Fatalf("step nodes %q, want the hosts' [cn1 cn2]", d.nodes)
	}
	ss, err := dialFake(t, d, hosts, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range ss {
		if s.facts.Name != hosts[i].Name || s.addr != "127.0.0.1" || s.port == 0 {
			t.Errorf("session %s: facts name %q, addr %q, port %d", hosts[i].Name, s.facts.Name, s.addr, s.port)
		}
		s.conn.Close()
	}
	d.Close()
	if d.exitErr != nil || d.stopped {
		t.Errorf("srun: %v (stopped by Close: %v), want a clean exit of its own", d.exitErr, d.stopped)
	}
}

// TestSrunDialerHostKeyMismatch: an agent whose host key is not the one
// its readiness line gave is refused at once, naming the node.
func TestSrunDialerHostKeyMismatch(t *testing.T) {
	hosts := slurmHosts(1)
	d := fakeSrunDialer(t, hosts, "liar")
	saved := srunExitWait
	srunExitWait = 100 * time.Millisecond
	defer func() { srunExitWait = saved }()
	defer d.Close()
	_, err := dialFake(t, d, hosts, 30*time.Second)
	if err == nil || !strings.Contains(err.Error(), "cn1 at 127.0.0.1:") || !strings.Contains(err.Error(), "another host key than its readiness line gave") {
		t.Fatalf("got %v, want a host key refusal naming cn1", err)
	}
	if !errors.Is(err, ErrPermanent) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a host key mismatch is not permanent, or waited for the timeout: %v", err)
	}
}

// TestSrunDialerStepNotStarted: a step srun cannot create (it waits
// silently) fails the dial at the start timeout with a message that says
// so and names the job; Close ends srun.
func TestSrunDialerStepNotStarted(t *testing.T) {
	hosts := slurmHosts(2)
	d := fakeSrunDialer(t, hosts, "silent")
	_, err := dialFake(t, d, hosts, 500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "the srun step that starts the agents has not started (srun is still waiting: is job 9 suspended, or its nodes busy?") {
		t.Fatalf("got %v, want the step-not-started message", err)
	}
	saved := srunExitWait
	srunExitWait = 100 * time.Millisecond
	defer func() { srunExitWait = saved }()
	d.Close()
	if !d.stopped {
		t.Error("Close did not end the waiting srun")
	}
	if d.exitErr == nil {
		t.Error("fake srun exited 0 after SIGTERM")
	}
}

// TestSrunDialerSrunFails: srun's own error ends the dial at once and is
// quoted.
func TestSrunDialerSrunFails(t *testing.T) {
	hosts := slurmHosts(2)
	d := fakeSrunDialer(t, hosts, "fail")
	defer d.Close()
	_, err := dialFake(t, d, hosts, 30*time.Second)
	if err == nil || !errors.Is(err, ErrPermanent) || !strings.Contains(err.Error(), "srun ended (exit status 1) before the agent on cn1 reported; srun said: srun: error: Unable to confirm allocation for job 9: Job is pending execution") {
		t.Fatalf("got %v", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want srun's message at once", err)
	}
}

func TestSrunArgs(t *testing.T) {
	got := srunArgs([]string{"cn1", "cn3"}, "/opt/gangway/agent", 60*time.Second, true)
	want := []string{"srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--nodelist=cn1,cn3",
		"--overlap", "--cpu-bind=none", "--mem=0", "--kill-on-bad-exit=1", "--mpi=none", "--input=none", "--export=ALL", "--job-name=gangway-agents",
		"/opt/gangway/agent", "--srun", "--srun-wait=1m0s", "--log-format=json", "-v"}
	if !slices.Equal(got, want) {
		t.Errorf("srunArgs:\n got %q\nwant %q", got, want)
	}
}

func TestSrunEnv(t *testing.T) {
	in := []string{"PATH=/bin", "SLURM_JOB_ID=9", "SLURM_GPUS_PER_TASK=1", "SLURM_NTASKS_PER_NODE=8", "SRUN_CPUS_PER_TASK=4",
		"SLURM_DISTRIBUTION=cyclic", wire.SrunKeyEnv + "=stale", "SLURM_EXPORT_ENV=NONE"}
	want := []string{"PATH=/bin", "SLURM_JOB_ID=9", "SLURM_NTASKS_PER_NODE=8", "SLURM_EXPORT_ENV=NONE", wire.SrunKeyEnv + "=ssh-ed25519 K"}
	if got := srunEnv(in, "ssh-ed25519 K"); !slices.Equal(got, want) {
		t.Errorf("srunEnv:\n got %q\nwant %q", got, want)
	}
}

// TestSrunReadinessLines: lines that are not readiness lines are skipped,
// bad, foreign and repeated ones are ignored and remembered for the
// error message.
func TestSrunReadinessLines(t *testing.T) {
	d, err := newSrun(Options{Kind: Slurm}, slurmHosts(2), false, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	k := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(newTestSigner().PublicKey())))
	w := &lineWriter{line: d.stdoutLine}
	fmt.Fprintf(w, "hello from a prolog\r\ngangway-agent-ready v1 cn1 10.0.0.1:5 %s\n", k)
	fmt.Fprintf(w, "gangway-agent-ready v1 cn1 10.0.0.9:5 %s\ngangway-agent-ready v1 cn7 10.0.0.7:5 %s\n", k, k)
	if r := d.ready["cn1"]; r.Addr != "10.0.0.1:5" || len(d.ready) != 1 {
		t.Errorf("ready %+v", d.ready)
	}
	if d.problem != "a readiness line from cn7, which is not a node of the step" {
		t.Errorf("problem %q", d.problem)
	}
	fmt.Fprint(w, "gangway-agent-ready v1 cn2 10.0.0.2 ", k, "\n")
	if !strings.Contains(d.problem, "bad agent readiness line") {
		t.Errorf("problem %q", d.problem)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := d.await(ctx, "cn2"); err == nil || !strings.Contains(err.Error(), "no agent on cn2 has reported from the srun step (1 of 2 nodes did); bad agent readiness line") {
		t.Errorf("await: %v", err)
	}
}
