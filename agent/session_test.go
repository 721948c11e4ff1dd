package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gangway-hpc/gangway/agent/proc/proctest"
	"github.com/gangway-hpc/gangway/agent/wire"
)

// client is the launcher's end of an in-process session.
type client struct {
	t       *testing.T
	conn    *wire.Conn
	started wire.Started // scriptsJob's job's
}

// serve starts a session of a on one end of a pipe and returns the
// launcher's end; the session must have ended by the test's cleanup.
func serve(t *testing.T, a *Agent) *client {
	t.Helper()
	ours, theirs := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- a.ServeSession(t.Context(), theirs) }()
	t.Cleanup(func() {
		ours.Close()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("session still running 30s after the launcher closed it")
		}
	})
	return &client{t: t, conn: wire.NewConn(ours)}
}

func (c *client) send(k wire.Kind, v any) {
	c.t.Helper()
	if err := c.conn.Send(k, v); err != nil {
		c.t.Fatalf("send %s: %v", k, err)
	}
}

// next returns the next message other than output.
func (c *client) next() wire.Msg {
	c.t.Helper()
	for {
		m, err := c.conn.Recv()
		if err != nil {
			c.t.Fatalf("receive: %v", err)
		}
		if m.Kind != wire.KindOutput {
			return m
		}
	}
}

// recv expects the next message other than output to be of kind want and
// decodes it into v unless v is nil.
func (c *client) recv(want wire.Kind, v any) {
	c.t.Helper()
	m := c.next()
	if m.Kind != want {
		c.t.Fatalf("got %s (%s), want %s", m.Kind, m.Payload, want)
	}
	if v != nil {
		if err := m.Decode(v); err != nil {
			c.t.Fatal(err)
		}
	}
}

// run sends j, fails the test unless the host is ready, starts the ranks
// and returns each rank's output once the host is done.
func (c *client) run(j wire.StartJob) map[int]string {
	c.t.Helper()
	c.startGo(j)
	out := map[int]string{}
	for {
		m, err := c.conn.Recv()
		if err != nil {
			c.t.Fatal(err)
		}
		if m.Kind == wire.KindDone {
			return out
		}
		if m.Kind == wire.KindOutput {
			rank, _, data, err := m.Output()
			if err != nil {
				c.t.Fatal(err)
			}
			out[rank] += string(data)
		}
	}
}

// startJob says Hello, Start and Go for j (its id from j.JobID, no rank
// on stdin, a second's kill grace, PATH=/usr/bin:/bin added to each
// rank's environment) and fails the test if the agent is not ready.
func (c *client) startJob(j wire.StartJob) {
	c.t.Helper()
	c.send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: j.JobID, Host: "h0"})
	c.recv(wire.KindFacts, nil)
	j.StdinRank, j.KillGrace = -1, time.Second
	for i := range j.Ranks {
		j.Ranks[i].Env = append(j.Ranks[i].Env, "PATH=/usr/bin:/bin")
	}
	c.startGo(j)
}

// startGo sends j, fails the test unless the host is ready, and starts
// the ranks.
func (c *client) startGo(j wire.StartJob) {
	c.t.Helper()
	c.send(wire.KindStart, j)
	var ready wire.Ready
	c.recv(wire.KindReady, &ready)
	if ready.Err != "" {
		c.t.Fatalf("ready: %s", ready.Err)
	}
	c.send(wire.KindGo, nil)
}

// TestExitCarriesSignalName: a rank killed by a signal is reported with
// the signal's number, its name and the shell's exit code.
func TestExitCarriesSignalName(t *testing.T) {
	a := &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t)}
	c := serve(t, a)
	c.startJob(wire.StartJob{JobID: "signame", Ranks: []wire.RankSpec{
		{Rank: 0, Argv: []string{"/bin/sh", "-c", "kill -KILL $$"}},
		{Rank: 1, LocalRank: 1, Argv: []string{"/bin/sh", "-c", "exit 3"}},
	}})
	// A rank's Exit may come before Started: its waiter does not wait for
	// the list of pids.
	exits := map[int]wire.Exit{}
	started := false
	for m := c.next(); m.Kind != wire.KindDone; m = c.next() {
		switch m.Kind {
		case wire.KindStarted:
			started = true
		case wire.KindExit:
			var x wire.Exit
			if err := m.Decode(&x); err != nil {
				t.Fatal(err)
			}
			exits[x.Rank] = x
		default:
			t.Fatalf("got %s (%s) before done", m.Kind, m.Payload)
		}
	}
	if !started || len(exits) != 2 {
		t.Fatalf("before done: started %v, exits %+v", started, exits)
	}
	if x := exits[0]; x.Signal != int(syscall.SIGKILL) || x.SignalName != "SIGKILL" || x.Code != 137 {
		t.Errorf("killed rank: %+v, want signal 9 SIGKILL, code 137", x)
	}
	if x := exits[1]; x.Signal != 0 || x.SignalName != "" || x.Code != 3 {
		t.Errorf("rank that exited 3: %+v, want no signal, code 3", x)
	}
}

// TestFactsCarryFreePort: every session's Facts name a free TCP port (the
// launcher takes rank 0's host's as MASTER_PORT).
func TestFactsCarryFreePort(t *testing.T) {
	c := serve(t, &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t)})
	c.send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "port", Host: "h0"})
	var f wire.Facts
	c.recv(wire.KindFacts, &f)
	if f.FreePort <= 0 || f.FreePort > 65535 {
		t.Fatalf("Facts.FreePort = %d, want a port", f.FreePort)
	}
}

// TestPingsBeforeHello: pings ahead of the Hello are passed over (a relay
// of an older build pinged its children before the launcher's Hello for
// them came); anything else first still ends the session.
func TestPingsBeforeHello(t *testing.T) {
	c := serve(t, &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t)})
	c.send(wire.KindPing, nil)
	c.send(wire.KindPing, nil)
	c.send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "pings", Host: "h0"})
	var f wire.Facts
	c.recv(wire.KindFacts, &f)

	c = serve(t, &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t)})
	c.send(wire.KindPing, nil)
	c.send(wire.KindStop, nil)
	if m, err := c.conn.Recv(); err == nil {
		t.Fatalf("a stop before the Hello: the agent answered %s", m.Kind)
	}
}

// TestLauncherTimeout: a session whose launcher falls silent ends after
// the agent's LauncherTimeout and takes its ranks with it; a launcher that
// keeps sending Pings keeps its job. The timeout is 2 s: a loaded machine
// may hold the pinger longer than a shorter one between two pings.
func TestLauncherTimeout(t *testing.T) {
	const timeout = 2 * time.Second
	for _, tt := range []struct {
		name  string
		pings bool
	}{{"Silent", false}, {"Pinging", true}} {
		t.Run(tt.name, func(t *testing.T) {
			a := &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t), LauncherTimeout: timeout}
			c := serve(t, a)
			c.startJob(wire.StartJob{JobID: "silent", Ranks: []wire.RankSpec{{Rank: 0, Argv: []string{"/bin/sleep", "600"}}}})
			var st wire.Started
			c.recv(wire.KindStarted, &st)
			pid := st.Pids[0]
			quit := make(chan struct{})
			var pinger sync.WaitGroup
			if tt.pings {
				pinger.Go(func() {
					for {
						select {
						case <-quit:
							return
						case <-time.After(50 * time.Millisecond):
							_ = c.conn.Send(wire.KindPing, nil)
						}
					}
				})
			}
			// Read until the session ends (Silent: within 30 s) or for 3
			// timeouts (Pinging).
			watch := 30 * time.Second
			if tt.pings {
				watch = 3 * timeout
			}
			ended := make(chan error, 1)
			go func() {
				for {
					if _, err := c.conn.Recv(); err != nil {
						ended <- err
						return
					}
				}
			}()
			select {
			case err := <-ended:
				if tt.pings {
					t.Fatalf("session ended while the launcher pinged: %v", err)
				}
			case <-time.After(watch):
				if !tt.pings {
					t.Fatal("session still open 30 s after the launcher fell silent (timeout 2 s)")
				}
			}
			close(quit)
			pinger.Wait()
			if tt.pings {
				if !procAlive(pid) {
					t.Errorf("rank (pid %d) died while its launcher pinged", pid)
				}
				c.conn.Close()
				<-ended
			}
			for deadline := time.Now().Add(10 * time.Second); procAlive(pid); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("rank (pid %d) still running after its session ended", pid)
				}
			}
		})
	}
}

// procAlive reports whether pid is a live process: present in /proc and
// not a zombie (a zombie still answers kill(pid, 0)).
func procAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// waitReaped waits until pid is gone from /proc (reaped, not a zombie),
// at most 10 s.
func waitReaped(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if proctest.State(pid) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d not reaped in 10 s", pid)
		}
	}
}

// TestErrorFilesGoWithTheJob: a failed rank's TORCHELASTIC_ERROR_FILE is
// read into its Exit, and the job's error-file directory is gone once the
// job is done, before the session ends: an agent killed after the job (a
// Slurm step's end) leaves nothing behind.
func TestErrorFilesGoWithTheJob(t *testing.T) {
	a := &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t)}
	c := serve(t, a)
	c.startJob(wire.StartJob{JobID: "errfiles", Ranks: []wire.RankSpec{
		{Rank: 0, Argv: []string{"/bin/sh", "-c", `printf '%s' "$TORCHELASTIC_ERROR_FILE" > "$TORCHELASTIC_ERROR_FILE"; exit 1`}},
	}})
	var path string
	for m := c.next(); m.Kind != wire.KindDone; m = c.next() {
		if m.Kind == wire.KindExit {
			var x wire.Exit
			if err := m.Decode(&x); err != nil {
				t.Fatal(err)
			}
			path = x.ErrorFile
		}
	}
	if !filepath.IsAbs(path) || filepath.Base(path) != "rank.0.json" {
		t.Fatalf("the rank's Exit carried error file %q, want its own path", path)
	}
	if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
		t.Errorf("the job's error-file directory %s is still there when the job is done: %v", filepath.Dir(path), err)
	}
}

// TestExitsBatched: told Hello.BatchExits, an agent whose eight ranks end
// together sends their exits in fewer frames than ranks (those that
// waited while one was sent, as one array), each rank's exit once, all
// before Done; not told, one frame per rank, as before.
func TestExitsBatched(t *testing.T) {
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprint("batch=", batch), func(t *testing.T) {
			c := serve(t, &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t)})
			c.send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "exits", Host: "h0", BatchExits: batch})
			c.recv(wire.KindFacts, nil)
			j := wire.StartJob{JobID: "exits", StdinRank: -1, KillGrace: time.Second}
			for r := range 8 {
				j.Ranks = append(j.Ranks, wire.RankSpec{Rank: r, LocalRank: r, Argv: []string{"/bin/sh", "-c", "exit " + strconv.Itoa(r)},
					Env: []string{"PATH=/usr/bin:/bin"}})
			}
			c.send(wire.KindStart, j)
			c.recv(wire.KindReady, nil)
			c.send(wire.KindGo, nil)
			// Read nothing for a moment: every rank ends, the first
			// exit's send waits on this end, the others queue behind it.
			time.Sleep(500 * time.Millisecond)
			codes := map[int]int{}
			frames := 0
			for m := c.next(); m.Kind != wire.KindDone; m = c.next() {
				if m.Kind != wire.KindExit {
					continue
				}
				xs, err := m.Exits()
				if err != nil {
					t.Fatal(err)
				}
				if !batch && len(xs) != 1 {
					t.Fatalf("not told to batch, a frame of %d exits", len(xs))
				}
				frames++
				for _, x := range xs {
					if _, dup := codes[x.Rank]; dup {
						t.Fatalf("rank %d's exit twice", x.Rank)
					}
					codes[x.Rank] = x.Code
				}
			}
			for r := range 8 {
				if code, ok := codes[r]; !ok || code != r {
					t.Errorf("rank %d: exit %d (reported %v), want %d", r, code, ok, r)
				}
			}
			t.Logf("8 exits in %d frames", frames)
			if batch && frames >= 8 || !batch && frames != 8 {
				t.Errorf("8 exits in %d frames (batching %v)", frames, batch)
			}
		})
	}
}

// exitsJob starts a job of one rank per script (told Hello.BatchExits)
// on an agent whose successful exits wait at most linger, and returns
// the client.
func exitsJob(t *testing.T, linger time.Duration, scripts ...string) *client {
	a := &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t), exitLinger: linger}
	return scriptsJob(t, a, wire.Hello{Version: wire.Version, JobID: "linger", Host: "h0", BatchExits: true}, scripts...)
}

// scriptsJob starts a job of one rank per script on a after hi, up to
// its Started, and returns the client.
func scriptsJob(t *testing.T, a *Agent, hi wire.Hello, scripts ...string) *client {
	c := serve(t, a)
	c.send(wire.KindHello, hi)
	c.recv(wire.KindFacts, nil)
	j := wire.StartJob{JobID: hi.JobID, StdinRank: -1, KillGrace: time.Second}
	for r, sh := range scripts {
		j.Ranks = append(j.Ranks, wire.RankSpec{Rank: r, LocalRank: r, Argv: []string{"/bin/sh", "-c", sh}, Env: []string{"PATH=/usr/bin:/bin"}})
	}
	c.send(wire.KindStart, j)
	c.recv(wire.KindReady, nil)
	c.send(wire.KindGo, nil)
	c.recv(wire.KindStarted, &c.started)
	return c
}

// nextExits returns the exits of the next exit frame.
func (c *client) nextExits() []wire.Exit {
	c.t.Helper()
	for {
		m := c.next()
		if m.Kind != wire.KindExit {
			c.t.Fatalf("got %s (%s), want exit", m.Kind, m.Payload)
		}
		xs, err := m.Exits()
		if err != nil {
			c.t.Fatal(err)
		}
		return xs
	}
}

// TestExitsLinger: successful exits wait for the host's other ranks (at
// most exitLinger), failures do not, and the last exit ends the wait.
func TestExitsLinger(t *testing.T) {
	t.Run("successes-together", func(t *testing.T) {
		// Eight ranks end 0 a few ms apart, read at once, successes
		// waiting up to an hour: one frame, sent at the last exit (it
		// does not wait for the linger), before Done.
		var scripts []string
		for r := range 8 {
			scripts = append(scripts, fmt.Sprintf("sleep 0.0%d; exit 0", r))
		}
		c := exitsJob(t, time.Hour, scripts...)
		seen, frames := map[int]bool{}, 0
		for len(seen) < 8 {
			for _, x := range c.nextExits() {
				if seen[x.Rank] || x.Code != 0 {
					t.Fatalf("exit %+v (seen %v)", x, seen)
				}
				seen[x.Rank] = true
			}
			frames++
		}
		c.recv(wire.KindDone, nil)
		if frames != 1 {
			t.Errorf("8 successful exits a few ms apart in %d frames, want 1", frames)
		}
	})
	t.Run("failure-at-once", func(t *testing.T) {
		// Rank 0 succeeds, rank 1 fails, the rest run until stopped, and
		// a success would wait an hour: the failure comes at once, while
		// they run, with rank 0's success in its frame or before it.
		// Rank 1 fails 2 s in: rank 0, started with it, has ended by then
		// even on a loaded machine (50 ms was a race there).
		c := exitsJob(t, time.Hour, "exit 0", "sleep 2; exit 3", "exec sleep 600", "exec sleep 600")
		var order []wire.Exit
		for len(order) == 0 || order[len(order)-1].Rank != 1 {
			order = append(order, c.nextExits()...)
		}
		if len(order) != 2 || order[0].Rank != 0 || order[0].Code != 0 || order[1].Code != 3 {
			t.Fatalf("exits before the stop %+v, want rank 0's 0 then rank 1's 3", order)
		}
		c.send(wire.KindStop, wire.Stop{})
		stopped := 0
		for stopped < 2 {
			for _, x := range c.nextExits() {
				if x.Rank < 2 || !x.Stopped {
					t.Fatalf("after the stop: %+v", x)
				}
				stopped++
			}
		}
		c.recv(wire.KindDone, nil)
	})
	t.Run("linger-ends", func(t *testing.T) {
		// Rank 0 succeeds while rank 1 runs on: its exit still comes
		// (after the linger), not at rank 1's end.
		c := exitsJob(t, 0, "exit 0", "exec sleep 600")
		if xs := c.nextExits(); len(xs) != 1 || xs[0].Rank != 0 || xs[0].Code != 0 {
			t.Fatalf("first exits %+v, want rank 0's success alone", xs)
		}
		c.send(wire.KindStop, wire.Stop{})
		if xs := c.nextExits(); len(xs) != 1 || xs[0].Rank != 1 || !xs[0].Stopped {
			t.Fatalf("after the stop %+v", xs)
		}
		c.recv(wire.KindDone, nil)
	})
}

// endsJob is exitsJob told Hello.Ends as well.
func endsJob(t *testing.T, scripts ...string) *client {
	return endsJobOn(t, &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t)}, scripts...)
}

// endsJobOn is endsJob served by a.
func endsJobOn(t *testing.T, a *Agent, scripts ...string) *client {
	return scriptsJob(t, a, wire.Hello{Version: wire.Version, JobID: "ends", Host: "h0", BatchExits: true, Ends: true}, scripts...)
}

// TestEnds: told Hello.Ends, a host whose eight ranks all exit 0 sends
// one Ends (Self, Last) and no exit, and so does one whose ranks the
// launcher stopped; one whose rank fails sends every exit (the
// successes held before the failure with it or before it) and an Ends
// that is its Done.
func TestEnds(t *testing.T) {
	t.Run("clean", func(t *testing.T) {
		var scripts []string
		for r := range 8 {
			scripts = append(scripts, fmt.Sprintf("sleep 0.%d; exit 0", r))
		}
		c := endsJob(t, scripts...)
		m := c.next()
		e, err := m.Ends()
		if err != nil {
			t.Fatalf("after Started: %s %s (%v), want ends", m.Kind, m.Payload, err)
		}
		if !e.Self || e.Done || !e.Last || e.Stopped != 0 || len(e.Hosts)+len(e.Spans) != 0 {
			t.Errorf("ends %+v, want self and last alone", e)
		}
	})
	t.Run("stopped", func(t *testing.T) {
		// The launcher stops the job (a failure elsewhere): ranks ended
		// by its stop are not failures it blames, and go unsent too,
		// counted as its stop's (one ended well before it: not counted;
		// one exits 0 at the TERM: its stop's all the same).
		scripts := []string{"exit 0", "trap 'exit 0' TERM; sleep 600 & wait"}
		for range 6 {
			scripts = append(scripts, "exec sleep 600")
		}
		// Rank 0 ended before the stop: the stop goes once the agent has
		// taken its end.
		ended0 := make(chan struct{})
		a := &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t), rankEnded: func(rank int) {
			if rank == 0 {
				close(ended0)
			}
		}}
		c := endsJobOn(t, a, scripts...)
		select {
		case <-ended0:
		case <-time.After(30 * time.Second):
			t.Fatal("rank 0's end (exit 0) not taken in 30 s")
		}
		c.send(wire.KindStop, wire.Stop{Grace: time.Second})
		m := c.next()
		e, err := m.Ends()
		if err != nil || !e.Self || !e.Last || e.Stopped != 7 {
			t.Fatalf("after the stop: %s %s (%v), want ends with self, 7 stopped", m.Kind, m.Payload, err)
		}
	})
	t.Run("a failure", func(t *testing.T) {
		// Eight ranks: four end well first (held), rank 4 fails, three
		// more end well after it (sent as they come).
		c := endsJob(t, "exit 0", "exit 0", "exit 0", "exit 0", "sleep 1; exit 3", "sleep 1.5; exit 0", "sleep 1.5; exit 0", "sleep 1.5; exit 0")
		codes := map[int]int{}
		var order []int
		for {
			m := c.next()
			if m.Kind == wire.KindEnds {
				e, err := m.Ends()
				if err != nil || !e.Done || e.Self || !e.Last || e.Stopped != 0 {
					t.Fatalf("ends %+v (%v), want done and last", e, err)
				}
				break
			}
			if m.Kind != wire.KindExit {
				t.Fatalf("got %s, want exits then ends", m.Kind)
			}
			xs, err := m.Exits()
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range xs {
				if _, dup := codes[x.Rank]; dup {
					t.Fatalf("rank %d's exit twice", x.Rank)
				}
				codes[x.Rank] = x.Code
				order = append(order, x.Rank)
			}
		}
		if !reflect.DeepEqual(codes, map[int]int{0: 0, 1: 0, 2: 0, 3: 0, 4: 3, 5: 0, 6: 0, 7: 0}) {
			t.Errorf("exits %v, want every rank's", codes)
		}
		if i := slices.Index(order, 4); i != 4 || len(order) != 8 {
			t.Errorf("exits in the order %v, want ranks 0-3 (held) before rank 4's failure, ranks 5-7 after", order)
		}
	})
}

// TestCompactStart: an agent says it takes the compact start, and its
// eight ranks started from one get the job's command and directory, their
// identity built from Place and the host's variables; a Place that is
// not this host's is refused in Ready, before anything runs.
func TestCompactStart(t *testing.T) {
	a := &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t)}
	c := serve(t, a)
	c.send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "compact", Host: "h0"})
	var f wire.Facts
	c.recv(wire.KindFacts, &f)
	if !f.ExpandsStart {
		t.Fatal("facts do not say ExpandsStart")
	}
	dir := t.TempDir()
	script := `echo "$(pwd) $RANK $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $HOROVOD_CROSS_SIZE $GANGWAY_HOST $CUDA_VISIBLE_DEVICES"`
	j := wire.StartJob{JobID: "compact", StdinRank: -1, KillGrace: time.Second, Argv: []string{"/bin/sh", "-c", script}, Dir: dir,
		Env: []string{"PATH=/usr/bin:/bin"}, HostEnv: []string{"GANGWAY_HOST=cn7"}}
	// Eight ranks, as on a DGX; hosts of other sizes before this one, so
	// that local ranks 6 and 7 are on fewer hosts than the rest.
	const local = 8
	for l := range local {
		crossSize := 4
		if l >= 6 {
			crossSize = 3
		}
		j.Ranks = append(j.Ranks, wire.RankSpec{Rank: 40 + l, LocalRank: l, Place: &wire.Place{Node: 5, LocalSize: local, Cross: 2, CrossSize: crossSize},
			Env: []string{"CUDA_VISIBLE_DEVICES=" + strconv.Itoa(l)}})
	}
	out := c.run(j)
	for l := range local {
		crossSize := 4
		if l >= 6 {
			crossSize = 3
		}
		want := fmt.Sprintf("%s %d %d 8 5 %d cn7 %d\n", dir, 40+l, l, crossSize, l)
		if out[40+l] != want {
			t.Errorf("rank %d printed %q, want %q", 40+l, out[40+l], want)
		}
	}

	c2 := serve(t, a)
	c2.send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "badplace", Host: "h0"})
	c2.recv(wire.KindFacts, nil)
	j.JobID, j.Ranks = "badplace", j.Ranks[:1]
	c2.send(wire.KindStart, j)
	var ready wire.Ready
	c2.recv(wire.KindReady, &ready)
	if ready.Err != "rank 40: place: local size 8, but this host runs 1" {
		t.Errorf("ready for a place of another host: %q", ready.Err)
	}
}

// TestSharedStart: the job frame (what every host's start shares) and
// then a start that says Shared: the ranks run with the frame's
// environment under their own, and the frame's stdin rank and kill grace.
// A Shared start without a job frame is refused in its Ready; a second
// job frame ends the session, naming it.
func TestSharedStart(t *testing.T) {
	a := &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t)}
	hello := func(job string) *client {
		c := serve(t, a)
		c.send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: job, Host: "h0"})
		var f wire.Facts
		c.recv(wire.KindFacts, &f)
		if !f.TakesShared {
			t.Fatal("facts do not say TakesShared")
		}
		return c
	}
	c := hello("shared")
	big := "FORWARDED=" + strings.Repeat("x", 4096) // a user's environment, forwarded
	c.send(wire.KindJob, wire.StartJob{JobID: "shared", Env: []string{"PATH=/usr/bin:/bin", "SHARED=job", big}, StdinRank: -1, KillGrace: time.Second})
	j := wire.StartJob{JobID: "shared", Shared: true, Argv: []string{"/bin/sh", "-c", `echo "$SHARED $OWN $GANGWAY_HOST ${#FORWARDED}"`}, HostEnv: []string{"GANGWAY_HOST=cn3"}}
	for l := range 8 { // eight ranks, as on a DGX host (the second of two)
		j.Ranks = append(j.Ranks, wire.RankSpec{Rank: 8 + l, LocalRank: l, Place: &wire.Place{Node: 1, LocalSize: 8, Cross: 1, CrossSize: 2}, Env: []string{"OWN=" + strconv.Itoa(l)}})
	}
	out := c.run(j)
	for l := range 8 {
		if want := fmt.Sprintf("job %d cn3 %d\n", l, len(big)-len("FORWARDED=")); out[8+l] != want {
			t.Errorf("rank %d printed %q, want %q", 8+l, out[8+l], want)
		}
	}

	c = hello("nojob")
	j.JobID = "nojob"
	c.send(wire.KindStart, j)
	var ready wire.Ready
	c.recv(wire.KindReady, &ready)
	if !strings.Contains(ready.Err, "did not come before it") {
		t.Errorf("a shared start without the job frame: ready %q", ready.Err)
	}

	c = hello("twice")
	c.send(wire.KindJob, wire.StartJob{JobID: "twice"})
	c.send(wire.KindJob, wire.StartJob{JobID: "twice"})
	var e wire.Error
	c.recv(wire.KindError, &e)
	if !strings.Contains(e.Msg, "a second job frame") {
		t.Errorf("a second job frame: error %q", e.Msg)
	}
}

// TestOutputLostIsSaid: a rank that goes on printing after its launcher's
// session broke loses its output (there is nowhere to send it); the agent
// says so once, at the first piece, and at the session's end how many
// pieces were lost when there were more, instead of nothing (it was
// silent) or one line a piece.
func TestOutputLostIsSaid(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	a := &Agent{Name: "h0", Version: "test", Log: zap.New(core)}
	ours, theirs := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- a.ServeSession(t.Context(), theirs) }()
	c := &client{t: t, conn: wire.NewConn(ours)}
	// It traps TERM so that it prints on while it is being stopped, and
	// ends by itself within 10 s at most.
	c.startJob(wire.StartJob{JobID: "lost", Ranks: []wire.RankSpec{{Rank: 0, Argv: []string{"/bin/sh", "-c",
		`trap 'echo term' TERM; i=0; while [ $i -lt 2000 ]; do echo "line $i"; i=$((i+1)); sleep 0.005; done`}}}})
	for m := c.next(); m.Kind != wire.KindStarted; m = c.next() {
	}
	if _, err := c.conn.Recv(); err != nil { // an output frame: it prints
		t.Fatal(err)
	}
	ours.Close() // the launcher is gone mid-output
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("session still running 30s after the launcher closed it")
	}
	first := logs.FilterMessage("rank output not sent to the launcher; later pieces that fail are counted").All()
	if len(first) != 1 || first[0].ContextMap()["rank"] != int64(0) {
		t.Fatalf("warnings at the first lost piece: %v, want one naming rank 0", first)
	}
	for _, e := range logs.FilterMessage("rank output not sent to the launcher").All() {
		if n, _ := e.ContextMap()["pieces"].(int64); n < 2 {
			t.Errorf("the session's summary says %v pieces: it is said only for more than one", e.ContextMap()["pieces"])
		}
	}
}

// TestStoppedSaysWhy: when the agent is told to stop (its context ends
// with StoppedError: SIGTERM from systemctl or docker), each launcher
// session tells its launcher so before it closes; a session that ends
// for another reason closes without a word.
func TestStoppedSaysWhy(t *testing.T) {
	for _, c := range []struct {
		name  string
		cause error
		want  string // the Error's text, "" for none
	}{
		{"stopped", StoppedError{Signal: "SIGTERM"}, "the agent was stopped (SIGTERM); its ranks are stopped"},
		{"cancelled", context.Canceled, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t)}
			ours, theirs := net.Pipe()
			ctx, cancel := context.WithCancelCause(t.Context())
			done := make(chan struct{})
			var served error
			go func() {
				defer close(done)
				served = a.ServeSession(ctx, theirs)
			}()
			t.Cleanup(func() {
				ours.Close()
				<-done
			})
			cl := &client{t: t, conn: wire.NewConn(ours)}
			cl.send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "stop", Host: "h0"})
			cl.recv(wire.KindFacts, nil)
			cancel(c.cause)
			m, err := cl.conn.Recv()
			switch {
			case c.want == "":
				if err == nil {
					t.Fatalf("got %s %s, want the session closed without a word", m.Kind, m.Payload)
				}
			case err != nil || m.Kind != wire.KindError:
				t.Fatalf("got %s %s (%v), want an Error", m.Kind, m.Payload, err)
			default:
				var e wire.Error
				if err := m.Decode(&e); err != nil || e.Msg != c.want || !e.Stopped {
					t.Errorf("Error %+v (%v), want %q, Stopped", e, err, c.want)
				}
			}
			select {
			case <-done:
				if !errors.Is(served, c.cause) {
					t.Errorf("ServeSession returned %v, want the cause %v", served, c.cause)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("session still running 30 s after its context ended")
			}
		})
	}
}

// TestOneNamePerJob: a job's sessions on one agent all come under one
// host name. A second name (two host entries of one launch reaching this
// machine) is refused with an Error naming both; the same name again is
// not (a relay's session the launcher gave up on, beside the launcher's
// own); once the first name's sessions end, another name may come.
func TestOneNamePerJob(t *testing.T) {
	a := &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t)}
	hello := func(c *client, host string) {
		c.send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "j1", Host: host})
		c.recv(wire.KindFacts, nil)
	}
	first := serve(t, a)
	hello(first, "dgx01")
	again := serve(t, a)
	hello(again, "dgx01")

	second := serve(t, a)
	hello(second, "dgx01.cluster.local")
	var e wire.Error
	second.recv(wire.KindError, &e)
	if want := `host entries "dgx01" and "dgx01.cluster.local" of this launch reach the same agent (the same machine): list each machine once, with all its slots`; e.Msg != want {
		t.Errorf("Error %q, want %q", e.Msg, want)
	}

	other := serve(t, a)
	other.send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "j2", Host: "dgx01.cluster.local"})
	other.recv(wire.KindFacts, nil) // another job: its own name

	first.conn.Close()
	again.conn.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		a.mu.Lock()
		n := len(a.jobs["j1"])
		a.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("job j1's sessions still counted 30 s after they closed")
		}
	}
	later := serve(t, a)
	hello(later, "dgx01.cluster.local")
	out := later.run(wire.StartJob{JobID: "j1", StdinRank: -1, Ranks: []wire.RankSpec{{Rank: 0, Argv: []string{"/bin/echo", "in"}}}})
	if out[0] != "in\n" {
		t.Errorf("the job under the second name printed %q, want it run", out[0])
	}
}
