// Package hostile_test attacks real agent processes (bin/agent, built by
// cmd/internal/e2e) the way a hostile user on the network or with a key
// would: floods of idle connections under a low file limit, malformed
// frames, impossible jobs and thousands of channels. Each test then
// proves the agent still serves: a real OpenSSH login, a job through the
// real launcher, its memory under /proc.
//
// Every flood is bounded in connections and time, and every process a
// test starts is ended by its pid at cleanup.
package hostile_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

func TestMain(m *testing.M) {
	e2e.DefaultSignals()
	code := m.Run()
	e2e.RemoveBinaries()
	os.Exit(code)
}

// agentProc starts one bin/agent process and returns its cluster.
func agentProc(t *testing.T, opts ...e2e.ProcOption) *e2e.Cluster {
	t.Helper()
	_, agentBin := e2e.BuildBinaries(t)
	return e2e.StartProcs(t, 1, agentBin, opts...)
}

// alive fails the test if the agent process has exited.
func alive(t *testing.T, p *e2e.Proc) {
	t.Helper()
	select {
	case <-p.Done():
		t.Fatalf("the agent exited (code %d); stderr:\n%s", p.Code(), e2e.Tail(p.Stderr.String(), 4000))
	default:
	}
	if err := syscall.Kill(p.Pid(), 0); err != nil {
		t.Fatalf("the agent (pid %d) is gone: %v", p.Pid(), err)
	}
}

// memKiB reads VmRSS and VmHWM (the peak) of pid from /proc, in KiB.
func memKiB(t *testing.T, pid int) (rss, peak int) {
	t.Helper()
	m := vm(t, pid)
	return m["VmRSS"], m["VmHWM"]
}

// vm reads the Vm* lines of /proc/pid/status, in KiB. VmRSS counts the
// pages a process touched; VmData counts the heap it mapped, touched or
// not: a buffer allocated for bytes that never came shows there.
func vm(t *testing.T, pid int) map[string]int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) >= 2 && strings.HasPrefix(f[0], "Vm") {
			m[strings.TrimSuffix(f[0], ":")], _ = strconv.Atoi(f[1])
		}
	}
	return m
}

// openFDs counts pid's open file descriptors.
func openFDs(pid int) int {
	es, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(es)
}

// sshLogin runs the system ssh client from source address src (its -b)
// against the cluster's agent and returns the remote command's output.
func sshLogin(t *testing.T, c *e2e.Cluster, src string) (string, error) {
	t.Helper()
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("no ssh client")
	}
	h := c.Hosts[0]
	ctx, cancel := context.WithTimeout(t.Context(), e2e.Deadline)
	defer cancel()
	args := append(sshtest.SSHArgs(c.Keys, h.Port), "-b", src, h.Addr, "echo login-ok")
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, "ssh", args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("ssh from %s: %w; stderr %q", src, err, errb.String())
	}
	if out.String() != "login-ok\n" {
		return out.String(), fmt.Errorf("ssh from %s: output %q", src, out.String())
	}
	return out.String(), nil
}

// goClient logs in with x/crypto/ssh: the fake peer's transport.
func goClient(t *testing.T, c *e2e.Cluster) *ssh.Client {
	t.Helper()
	h := c.Hosts[0]
	cl, err := ssh.Dial("tcp", h.HostPort(), &ssh.ClientConfig{
		User:            "root",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(c.Keys.ClientSigner)},
		HostKeyCallback: ssh.FixedHostKey(h.HostPub),
		Timeout:         e2e.Deadline,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// subsystem opens a session channel running the gangway subsystem.
func subsystem(t *testing.T, cl *ssh.Client) ssh.Channel {
	t.Helper()
	ch, reqs, err := cl.OpenChannel("session", nil)
	if err != nil {
		t.Fatal(err)
	}
	go ssh.DiscardRequests(reqs)
	ok, err := ch.SendRequest("subsystem", true, ssh.Marshal(struct{ Name string }{wire.Subsystem}))
	if err != nil || !ok {
		t.Fatalf("subsystem request: %v %v", ok, err)
	}
	t.Cleanup(func() { ch.Close() })
	return ch
}

// session opens a launcher session's channel on a connection of its own.
func session(t *testing.T, c *e2e.Cluster) ssh.Channel {
	t.Helper()
	return subsystem(t, goClient(t, c))
}

// recv reads the agent's next frame within the deadline.
func recv(t *testing.T, c *wire.Conn) (wire.Msg, error) {
	t.Helper()
	type res struct {
		m   wire.Msg
		err error
	}
	got := make(chan res, 1)
	go func() {
		m, err := c.Recv()
		got <- res{m, err}
	}()
	select {
	case r := <-got:
		return r.m, r.err
	case <-time.After(e2e.Deadline):
		c.Close()
		t.Fatalf("no frame from the agent within %v", e2e.Deadline)
		return wire.Msg{}, nil
	}
}

// expect reads the next frame other than output and name requests, which
// must be of kind want, into v.
func expect(t *testing.T, c *wire.Conn, want wire.Kind, v any) {
	t.Helper()
	for {
		m, err := recv(t, c)
		if err != nil {
			t.Fatalf("waiting for %s: %v", want, err)
		}
		if m.Kind == wire.KindOutput || m.Kind == wire.KindName && want != wire.KindName {
			continue // rank output, and name requests these fakes leave unanswered
		}
		if m.Kind != want {
			t.Fatalf("got %s (%.300s), want %s", m.Kind, m.Payload, want)
		}
		if v != nil {
			if err := m.Decode(v); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
}

// hello opens a launcher session on ch: Hello, then the agent's Facts.
func hello(t *testing.T, ch ssh.Channel, job string) *wire.Conn {
	t.Helper()
	c := wire.NewConn(ch)
	if err := c.Send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: job, Host: "agent1"}); err != nil {
		t.Fatal(err)
	}
	expect(t, c, wire.KindFacts, nil)
	return c
}
