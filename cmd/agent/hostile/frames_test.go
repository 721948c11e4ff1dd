package hostile_test

import (
	"encoding/binary"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

func header(k wire.Kind, n uint32) []byte {
	h := make([]byte, 5)
	h[0] = byte(k)
	binary.BigEndian.PutUint32(h[1:], n)
	return h
}

func write(t *testing.T, ch ssh.Channel, b []byte) {
	t.Helper()
	if _, err := ch.Write(b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// expectError reads frames until the agent's Error, which must contain
// want, then the end of the channel.
func expectError(t *testing.T, c *wire.Conn, want string) string {
	t.Helper()
	var e wire.Error
	expect(t, c, wire.KindError, &e)
	if !strings.Contains(e.Msg, want) {
		t.Fatalf("agent's error %q, want %q", e.Msg, want)
	}
	if m, err := recv(t, c); err == nil {
		t.Fatalf("after its error the agent sent %s, want the end of the session", m.Kind)
	}
	return e.Msg
}

// TestHostileFrames: a fake launcher with a valid key sends what no
// launcher would. Each case ends or refuses only its own session, with an
// error that says what was wrong; a job that runs meanwhile on another
// session of the same agent is untouched, and afterwards the agent still
// serves a real ssh login and a job through the real launcher. Its memory
// stays bounded: 32 headers announcing frames the agent must not buffer
// up front cost it a few MiB, not 512 MiB. Every launcher session has its
// own connection, as a launcher's does.
func TestHostileFrames(t *testing.T) {
	launcherBin, _ := e2e.BuildBinaries(t)
	c := agentProc(t)
	p := c.Procs[0]
	rss0, _ := memKiB(t, p.Pid())
	data0 := vm(t, p.Pid())["VmData"]

	// A job that runs throughout, on its own connection.
	bystander := hello(t, session(t, c), "bystander")
	sleep := []string{"/bin/sh", "-c", "echo up; exec sleep 600"}
	if err := bystander.Send(wire.KindStart, wire.StartJob{JobID: "bystander", StdinRank: -1, KillGrace: time.Second,
		Ranks: []wire.RankSpec{{Rank: 0, Argv: sleep, Env: []string{"PATH=/usr/bin:/bin"}}}}); err != nil {
		t.Fatal(err)
	}
	var ready wire.Ready
	expect(t, bystander, wire.KindReady, &ready)
	if ready.Err != "" {
		t.Fatal(ready.Err)
	}
	if err := bystander.Send(wire.KindGo, nil); err != nil {
		t.Fatal(err)
	}
	expect(t, bystander, wire.KindStarted, nil)
	// Its launcher's heartbeat, so that an agent that ends silent
	// launchers' sessions keeps this one.
	stopPings := make(chan struct{})
	var pinger sync.WaitGroup
	pinger.Go(func() {
		for {
			select {
			case <-stopPings:
				return
			case <-time.After(time.Second):
				_ = bystander.Send(wire.KindPing, nil)
			}
		}
	})
	defer pinger.Wait()
	defer close(stopPings)

	t.Run("64 MiB headers on 8 sessions", func(t *testing.T) {
		var conns []*wire.Conn
		for range 8 {
			ch := session(t, c)
			write(t, ch, header(wire.KindHello, 64<<20))
			conns = append(conns, wire.NewConn(ch))
		}
		for _, c := range conns {
			msg := expectError(t, c, "wire: hello frame too large: 67108864 bytes, the limit for hello is 16777216")
			t.Logf("agent: %s", msg)
		}
	})
	rss64, _ := memKiB(t, p.Pid())

	t.Run("16 MiB announced, 1 KiB sent, on 32 sessions", func(t *testing.T) {
		var chans []ssh.Channel
		for range 32 {
			ch := session(t, c)
			write(t, ch, header(wire.KindHello, 16<<20))
			write(t, ch, []byte(`{"version":`+strconv.Itoa(wire.Version)+`,"job_id":"big"`+strings.Repeat(" ", 1000)))
			chans = append(chans, ch)
		}
		time.Sleep(500 * time.Millisecond) // let the agent read what came
		m := vm(t, p.Pid())
		t.Logf("agent with 32 frames of 16 MiB announced and 1 KiB sent each: RSS %d KiB, heap mapped (VmData) %d KiB, %d KiB more than before",
			m["VmRSS"], m["VmData"], m["VmData"]-data0)
		if m["VmRSS"] > 200<<10 || m["VmData"]-data0 > 200<<10 {
			t.Errorf("agent RSS %d KiB, VmData %d KiB more, with 32 pending frames: want both under 200 MiB (32 x 16 MiB allocated up front is 512 MiB)",
				m["VmRSS"], m["VmData"]-data0)
		}
		// Finishing one: a 16 MiB hello (JSON padded with blanks) is a
		// frame like any other.
		rest := strings.Repeat(" ", 16<<20-1027-1) + "}"
		write(t, chans[0], []byte(rest))
		expect(t, wire.NewConn(chans[0]), wire.KindFacts, nil)
		for _, ch := range chans {
			ch.Close()
		}
	})

	t.Run("unknown kind", func(t *testing.T) {
		ch := session(t, c)
		write(t, ch, append(header(200, 3), "abc"...))
		t.Logf("agent: %s", expectError(t, wire.NewConn(ch), "unknown frame kind 200 (3 bytes announced)"))
	})

	t.Run("unknown kind after hello", func(t *testing.T) {
		ch := session(t, c)
		hello(t, ch, "k")
		write(t, ch, header(77, 1<<30))
		t.Logf("agent: %s", expectError(t, wire.NewConn(ch), "unknown frame kind 77 (1073741824 bytes announced)"))
	})

	t.Run("output frame to the agent", func(t *testing.T) {
		wc := hello(t, session(t, c), "o")
		if err := wc.SendOutput(0, wire.Stdout, []byte("not yours\n")); err != nil {
			t.Fatal(err)
		}
		t.Logf("agent: %s", expectError(t, wc, "unexpected message output"))
	})

	t.Run("truncated header", func(t *testing.T) {
		ch := session(t, c)
		write(t, ch, []byte{byte(wire.KindHello), 0, 0})
		if err := ch.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := io.Copy(io.Discard, ch); done <- err }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("channel: %v", err)
			}
		case <-time.After(e2e.Deadline):
			t.Fatal("the agent kept a session whose header was cut short")
		}
	})

	t.Run("truncated payload", func(t *testing.T) {
		ch := session(t, c)
		wc := hello(t, ch, "tp")
		write(t, ch, append(header(wire.KindStart, 100), `{"job_id":`...))
		_ = ch.CloseWrite()
		if m, err := recv(t, wc); err == nil {
			t.Fatalf("the agent answered a cut frame with %s", m.Kind)
		}
	})

	sh := []string{"/bin/sh", "-c", "exit 0"}
	for _, tc := range []struct {
		name string
		job  wire.StartJob
		want string
	}{
		{"local rank -1 with core binding", wire.StartJob{StdinRank: -1, Bind: "core", Ranks: []wire.RankSpec{{Rank: 0, LocalRank: -1, Argv: sh}}},
			"rank 0: local rank -1: want 0 (this host runs 1 rank)"},
		{"duplicate ranks", wire.StartJob{StdinRank: -1, Ranks: []wire.RankSpec{{Rank: 3, LocalRank: 0, Argv: sh}, {Rank: 3, LocalRank: 1, Argv: sh}}},
			"rank 3 listed twice"},
		{"GPU the host lacks", wire.StartJob{StdinRank: -1, Ranks: []wire.RankSpec{{Rank: 0, Argv: sh, GPUs: []int{-4}}}},
			"rank 0: GPU -4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wc := hello(t, session(t, c), "bad")
			if err := wc.Send(wire.KindStart, tc.job); err != nil {
				t.Fatal(err)
			}
			var r wire.Ready
			expect(t, wc, wire.KindReady, &r)
			if !strings.Contains(r.Err, tc.want) {
				t.Fatalf("Ready.Err %q, want %q", r.Err, tc.want)
			}
			t.Logf("agent: %s", r.Err)
		})
	}

	t.Run("5000 channels on one connection", func(t *testing.T) {
		cl := goClient(t, c)
		t0 := time.Now()
		var open []ssh.Channel
		refused := 0
		var last error
		for range 5000 {
			ch, reqs, err := cl.OpenChannel("session", nil)
			var oe *ssh.OpenChannelError
			switch {
			case err == nil:
				go ssh.DiscardRequests(reqs)
				open = append(open, ch)
			case errors.As(err, &oe) && oe.Reason == ssh.ResourceShortage:
				refused++
				last = err
			default:
				t.Fatalf("channel %d: %v", len(open)+refused+1, err)
			}
			if time.Since(t0) > e2e.Deadline {
				t.Fatalf("5000 channel opens took over %v", e2e.Deadline)
			}
		}
		if len(open) != 10 || refused != 4990 {
			t.Errorf("%d channels opened, %d refused; want 10 and 4990", len(open), refused)
		}
		t.Logf("5000 channels on one connection in %v: %d opened, %d refused (%v)", time.Since(t0).Round(time.Millisecond), len(open), refused, last)
		for _, ch := range open {
			ch.Close()
		}
	})

	alive(t, p)
	if err := bystander.Send(wire.KindStop, wire.Stop{Grace: time.Second}); err != nil {
		t.Fatalf("the bystander's session is gone: %v", err)
	}
	var x wire.Exit
	expect(t, bystander, wire.KindExit, &x)
	if !x.Stopped {
		t.Errorf("bystander's rank: %+v, want stopped by its launcher", x)
	}
	expect(t, bystander, wire.KindDone, nil)

	if _, err := sshLogin(t, c, addrIn(c, 210)); err != nil {
		t.Fatalf("ssh after the hostile sessions: %v", err)
	}
	h := c.Hosts[0]
	l := e2e.StartProc(t, nil, launcherBin, append(append([]string{"-np", "2", "-H", c.HostList(2)}, c.SSHFlags()...), "/bin/echo", "job-ok")...)
	if code := l.Wait(t); code != 0 || strings.Count(l.Stdout.String(), "job-ok") != 2 {
		t.Fatalf("job after the hostile sessions: exit %d\nstdout:\n%s\nstderr:\n%s", code, l.Stdout, l.Stderr)
	}
	alive(t, p)
	rss, peak := memKiB(t, p.Pid())
	if peak > 200<<10 {
		t.Errorf("the agent's peak RSS was %d KiB, want under 200 MiB", peak)
	}
	t.Logf("agent %s: RSS %d KiB at start, %d KiB after the 64 MiB headers, %d KiB at the end, peak %d KiB (the 16 MiB hello it read included)",
		h.Addr, rss0, rss64, rss, peak)
}
