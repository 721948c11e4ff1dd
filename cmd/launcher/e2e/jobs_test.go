package e2e_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/proc/proctest"
	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/launcher"
	"github.com/gangway-hpc/gangway/launcher/diagnose"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// TestConcurrentJobs runs two jobs on one agent at once: each sees only
// its own ranks, a failing rank stops only its own job, and both end as
// their ranks decide.
func TestConcurrentJobs(t *testing.T) {
	e2e.NoTree(t, "one host")
	t.Parallel()
	c := e2e.StartLocal(t, 1)
	dir := t.TempDir()
	endA, failB := filepath.Join(dir, "end-a"), filepath.Join(dir, "fail-b")
	a := c.StartLauncher(t, fake(t, 2, c.HostList(2), "failonfile:"+endA+":0")...)
	b := c.StartLauncher(t, fake(t, 2, c.HostList(2), "byrank:0=failonfile:"+failB+":3,*=sleep", "--kill-grace", "5s")...)
	outA, okA := a.Stdout.WaitFor(e2e.Deadline, e2e.HasReady(2))
	outB, okB := b.Stdout.WaitFor(e2e.Deadline, e2e.HasReady(2))
	if !okA || !okB {
		t.Fatalf("jobs did not start:\nA:\n%s\n%s\nB:\n%s\n%s", outA, a.Stderr, outB, b.Stderr)
	}
	pidsA := pidsOf(t, e2e.ReadyPids(outA), 0, 1)
	pidsB := pidsOf(t, e2e.ReadyPids(outB), 0, 1)
	for _, p := range pidsA {
		if slices.Contains(pidsB, p) {
			t.Fatalf("pid %d in both jobs' output: A %v, B %v", p, pidsA, pidsB)
		}
	}
	if n := len(lines(outA)); n != 2 {
		t.Errorf("job A printed %d lines, want its own 2:\n%s", n, outA)
	}

	// B's rank 0 fails: B's rank 1 is stopped, A's ranks are untouched.
	if err := os.WriteFile(failB, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := b.Wait(t); code != 3 {
		t.Fatalf("job B: exit code %d, want 3\nstderr:\n%s", code, b.Stderr)
	}
	if left := proctest.WaitGone(e2e.Deadline, pidsB...); len(left) > 0 {
		t.Fatalf("job B's ranks still running: %v", left)
	}
	time.Sleep(200 * time.Millisecond) // let a wrongly aimed signal land
	for _, p := range pidsA {
		if proctest.Gone(p) {
			t.Errorf("job A's rank pid %d died with job B", p)
		}
	}
	select {
	case <-a.Done():
		t.Fatalf("job A ended with job B (code %d)\nstderr:\n%s", a.Code(), a.Stderr)
	default:
	}

	if err := os.WriteFile(endA, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := a.Wait(t); code != 0 {
		t.Fatalf("job A: exit code %d, want 0\nstderr:\n%s", code, a.Stderr)
	}
	if left := proctest.WaitGone(e2e.Deadline, pidsA...); len(left) > 0 {
		t.Errorf("job A's ranks still running: %v", left)
	}
}

// TestLauncherRefusesOtherVersion: an agent whose Facts carry another
// protocol version fails the launch at once with the version message.
func TestLauncherRefusesOtherVersion(t *testing.T) {
	t.Parallel()
	fakes := make(chan error, 1)
	remote := transport.DialerFunc(func(ctx context.Context, h hostfile.Host) (io.ReadWriteCloser, string, error) {
		ours, theirs := net.Pipe()
		go func() {
			c := wire.NewConn(theirs)
			defer c.Close()
			m, err := c.Recv()
			if err == nil && m.Kind != wire.KindHello {
				err = errors.New("first message " + m.Kind.String())
			}
			if err == nil {
				err = c.Send(wire.KindFacts, wire.Facts{Version: 99, Name: h.Name})
			}
			for err == nil {
				_, err = c.Recv() // until the launcher hangs up
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) {
				err = nil
			}
			fakes <- err
		}()
		return ours, "127.0.0.9", nil
	})
	// A launcher that retried the mismatch would outlast the harness's
	// deadline, well short of this start timeout, and fail the test.
	_, stderr, code := e2e.Run(t, launcher.Deps{Remote: remote}, fake(t, 1, "oldagent:1", "exit:0", "--start-timeout", "10m")...)
	if code != 1 {
		t.Fatalf("exit code %d, want 1\nstderr:\n%s", code, stderr)
	}
	want := "host oldagent: " + (&wire.VersionError{Ours: wire.Version, Theirs: 99}).Error()
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
	select {
	case err := <-fakes:
		if err != nil {
			t.Errorf("fake agent: %v", err)
		}
	case <-time.After(e2e.Deadline):
		t.Error("the launcher never closed the fake agent's session")
	}
	t.Logf("launcher: %s", stderr)
}

// TestLauncherEndsLyingAgent: an agent that sends frames for ranks it
// does not run, a bad frame, a second Started or a second Exit for a rank
// is ended as a protocol violation naming the host (an agent's Error ends
// it too); the launcher neither panics nor waits, and exits 255.
func TestLauncherEndsLyingAgent(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		lie  func(c *wire.Conn) error
		want string
	}{
		{"OutputForAnotherRank", func(c *wire.Conn) error { return c.SendOutput(1000000, wire.Stdout, []byte("hi\n")) },
			"lost the agent on liar: protocol violation: it sent output for rank 1000000, which it does not run"},
		{"ExitForAnotherRank", func(c *wire.Conn) error { return c.Send(wire.KindExit, wire.Exit{Rank: 7, Code: 1}) },
			"lost the agent on liar: protocol violation: it sent an exit for rank 7, which it does not run"},
		{"BadOutputFrame", func(c *wire.Conn) error { return c.Send(wire.KindOutput, nil) },
			"lost the agent on liar: protocol violation: it sent a bad output frame"},
		{"SecondStarted", func(c *wire.Conn) error { return c.Send(wire.KindStarted, wire.Started{Pids: map[int]int{0: 1}}) },
			"lost the agent on liar: protocol violation: it sent a second started message"},
		{"SecondExit", func(c *wire.Conn) error {
			if err := c.Send(wire.KindExit, wire.Exit{Rank: 0}); err != nil {
				return err
			}
			return c.Send(wire.KindExit, wire.Exit{Rank: 0})
		}, "lost the agent on liar: protocol violation: it sent a second exit for rank 0"},
		{"AgentError", func(c *wire.Conn) error { return c.Send(wire.KindError, wire.Error{Msg: "boom"}) },
			"lost the agent on liar: it reported an error: boom"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			remote := transport.DialerFunc(func(ctx context.Context, h hostfile.Host) (io.ReadWriteCloser, string, error) {
				ours, theirs := net.Pipe()
				go func() { // ends when the launcher closes its end
					c := wire.NewConn(theirs)
					defer c.Close()
					for {
						m, err := c.Recv()
						if err != nil {
							return
						}
						switch m.Kind {
						case wire.KindHello:
							err = c.Send(wire.KindFacts, wire.Facts{Version: wire.Version, Name: h.Name, CPUs: 1})
						case wire.KindStart:
							err = c.Send(wire.KindReady, wire.Ready{})
						case wire.KindGo:
							if err = c.Send(wire.KindStarted, wire.Started{Pids: map[int]int{0: 1}}); err == nil {
								err = tt.lie(c)
							}
						}
						if err != nil {
							return
						}
					}
				}()
				return ours, "127.0.0.9", nil
			})
			_, stderr, code := e2e.Run(t, launcher.Deps{Remote: remote}, "-np", "1", "-H", "liar:1", "true")
			if code != diagnose.ExitLost || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, want %d and %q in:\n%s", code, diagnose.ExitLost, tt.want, stderr)
			}
		})
	}
}
