package sshd_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent"
	"github.com/gangway-hpc/gangway/agent/agenttest"
	"github.com/gangway-hpc/gangway/agent/sshd"
	"github.com/gangway-hpc/gangway/agent/wire"
)

// launcherSession opens the gangway subsystem on cl and exchanges Hello
// and Facts.
func launcherSession(t *testing.T, cl *ssh.Client, job string) *wire.Conn {
	t.Helper()
	ch, reqs, err := cl.OpenChannel("session", nil)
	if err != nil {
		t.Fatalf("launcher session: %v", err)
	}
	go ssh.DiscardRequests(reqs)
	if ok, err := ch.SendRequest("subsystem", true, ssh.Marshal(struct{ Name string }{wire.Subsystem})); err != nil || !ok {
		t.Fatalf("subsystem: %v %v", ok, err)
	}
	c := wire.NewConn(ch)
	t.Cleanup(func() { c.Close() })
	if err := c.Send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: job}); err != nil {
		t.Fatal(err)
	}
	if m, err := c.Recv(); err != nil || m.Kind != wire.KindFacts {
		t.Fatalf("hello: %v %v, want facts", m.Kind, err)
	}
	return c
}

// startJob sends a one-rank job and returns Ready's error.
func startJob(t *testing.T, c *wire.Conn) string {
	t.Helper()
	j := wire.StartJob{JobID: "j", StdinRank: -1, Ranks: []wire.RankSpec{{Rank: 0, Argv: []string{"/bin/sh", "-c", "exit 0"}}}}
	if err := c.Send(wire.KindStart, j); err != nil {
		t.Fatal(err)
	}
	m, err := c.Recv()
	if err != nil || m.Kind != wire.KindReady {
		t.Fatalf("start job: %v %v, want ready", m.Kind, err)
	}
	var r wire.Ready
	if err := m.Decode(&r); err != nil {
		t.Fatal(err)
	}
	return r.Err
}

// refusedFor checks that err is a channel refusal naming the limit.
func refusedFor(t *testing.T, what string, err error, limit string) {
	t.Helper()
	var oe *ssh.OpenChannelError
	if !errors.As(err, &oe) || oe.Reason != ssh.ResourceShortage || !strings.Contains(oe.Message, "--"+limit) {
		t.Fatalf("%s: %v, want a resource-shortage refusal naming --%s", what, err, limit)
	}
	t.Logf("%s: %v", what, err)
}

// TestUserLimits: one user's connections, sessions over all of them and
// launcher jobs are capped; a refusal names its limit (a channel refusal
// for connections and sessions, Ready's error for a job) and is logged;
// what is given back can be taken again. Each launcher session has a
// connection of its own, as a launcher's does: its end closes it.
func TestUserLimits(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.WarnLevel)
	c := agenttest.StartLocal(t, 1, agenttest.WithServer(func(_ int, s *sshd.Server) {
		s.UserLimits = sshd.UserLimits{MaxUserConnections: 3, MaxUserSessions: 4, MaxUserJobs: 1}
		s.Log = zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core))
	}))
	h := c.Hosts[0]
	dial := func() *ssh.Client {
		t.Helper()
		cl, err := dialAgent(h, c.Keys.ClientSigner)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		// The agent answers a global request once it has counted the
		// connection (or refused it): the next one is counted after.
		if _, _, err := cl.SendRequest("keepalive@openssh.com", true, nil); err != nil {
			t.Fatal(err)
		}
		return cl
	}
	cl1, cl2, cl3 := dial(), dial(), dial()
	cl4 := dial()
	_, err := cl4.NewSession()
	refusedFor(t, "a fourth connection's session", err, "max-user-connections")
	if err := cl4.Wait(); err == nil {
		t.Error("the refused connection ended without an error")
	}

	// Jobs: one launcher session takes the one job, a second is refused.
	job := launcherSession(t, cl1, "first")
	if e := startJob(t, job); e != "" {
		t.Fatalf("first job: %s", e)
	}
	second := launcherSession(t, cl2, "second")
	if e := startJob(t, second); !strings.Contains(e, "too many jobs for user root on this host (at most 1, the agent's --max-user-jobs)") {
		t.Fatalf("second job: Ready.Err %q, want the job limit", e)
	}
	// Sessions: two open, two more on a third connection, and no fifth.
	for i := range 2 {
		if _, err := cl3.NewSession(); err != nil {
			t.Fatalf("session %d: %v", 3+i, err)
		}
	}
	_, err = cl3.NewSession()
	refusedFor(t, "a fifth session", err, "max-user-sessions")

	// What ends is given back: the first job's session ends (and its
	// connection with it), and the refused StartJob, sent again, runs;
	// a new connection gets in and opens a session.
	job.Close()
	deadline := time.Now().Add(agenttest.Deadline)
	for e := startJob(t, second); e != ""; e = startJob(t, second) {
		if time.Now().After(deadline) || !strings.Contains(e, "--max-user-jobs") {
			t.Fatalf("a job after the first one ended: %s", e)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitFor(t, func() bool {
		cl, err := dialAgent(h, c.Keys.ClientSigner)
		if err != nil {
			return false
		}
		defer cl.Close()
		s, err := cl.NewSession()
		if err != nil {
			return false
		}
		s.Close()
		return true
	})
	if n := logs.FilterMessage("refused over a per-user limit").Len(); n < 3 {
		t.Errorf("%d log lines for refusals over a per-user limit, want one for each of 3 limits", n)
	}
}

// TestStartJobTimeout: a launcher session that sends no job within the
// agent's StartJobTimeout gets an error naming it and is closed; one that
// did send its job is kept. The timeout is 2 s: the busy session's job
// must be taken within it on a loaded machine.
func TestStartJobTimeout(t *testing.T) {
	t.Parallel()
	c := agenttest.StartLocal(t, 1, agenttest.WithAgent(func(_ int, a *agent.Agent) { a.StartJobTimeout = 2 * time.Second }))
	dial := func() *ssh.Client {
		cl, err := dialAgent(c.Hosts[0], c.Keys.ClientSigner)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	busy := launcherSession(t, dial(), "busy")
	if e := startJob(t, busy); e != "" {
		t.Fatal(e)
	}
	idle := launcherSession(t, dial(), "idle")
	t0 := time.Now()
	m, err := idle.Recv()
	var e wire.Error
	if err != nil || m.Kind != wire.KindError || m.Decode(&e) != nil || !strings.Contains(e.Msg, "no job within 2s of the session's start (the agent's --start-job-timeout)") {
		t.Fatalf("idle session: %v %v %q, want an error naming --start-job-timeout", m.Kind, err, e.Msg)
	}
	if _, err := idle.Recv(); err == nil {
		t.Fatal("the idle session was not closed after its error")
	}
	t.Logf("idle session closed after %v: %s", time.Since(t0).Round(time.Millisecond), e.Msg)
	// The busy one is still served: Go starts its rank.
	if err := busy.Send(wire.KindGo, nil); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := busy.Recv()
		if err != nil {
			t.Fatalf("the session with a job: %v", err)
		}
		if m.Kind == wire.KindDone {
			break
		}
	}
}
