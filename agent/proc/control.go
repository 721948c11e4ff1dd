package proc

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gangway-hpc/gangway/internal/fdio"
	"github.com/gangway-hpc/gangway/internal/osproc"
)

// superGroup is the agent's side of one supervisor and the programs it
// runs (StartGroup). The agent writes the job (superSpec) and then one
// line per signal to deliver, "sig I N" (SIGKILL: kill program I's
// group); the supervisor writes one line per program when it has started
// it or could not ("pid I N", "err I CODE MESSAGE") and one when it has
// ended ("exit I STATUS"). The socket's EOF is, for the supervisor, the
// agent's death, and for the agent, the supervisor's end.
type superGroup struct {
	cmd   *exec.Cmd
	f     *os.File        // the agent's end, non-blocking so that writes can have a deadline
	raw   syscall.RawConn // f's descriptor (fdio.WriteWithin), found once
	wmu   sync.Mutex
	procs []*Proc       // by index in the job, none nil
	ended atomic.Int32  // programs whose end is known
	gone  chan struct{} // closed once the supervisor has been reaped
	// stoppers are StopAll's Shutdowns; the last program's Done waits
	// for them.
	stoppers sync.WaitGroup
}

// supervised is a Proc's part in its group.
type supervised struct {
	g     *superGroup
	index int
	known chan struct{} // closed once the start report is in, or the supervisor is gone
	pid   int           // the program's pid, from the report
	err   error         // why the supervisor could not start the program
	code  int           // the exit code that goes with err
	end   chan struct{} // closed once the program's end is known
	ws    syscall.WaitStatus
	lost  bool // the supervisor ended before it reported the program's end
}

// newControl makes a control socket: the agent's end, non-blocking so
// that writes can have a deadline, and the supervisor's (its ExtraFiles).
func newControl() (*os.File, *os.File, error) {
	// Close-on-exec before any other fork can copy them: a copy of the
	// supervisor's end in another child would hide the supervisor's EOF.
	syscall.ForkLock.RLock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, nil, err
	}
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "supervisor control"), os.NewFile(uintptr(fds[1]), "supervisor control"), nil
}

// writeSpec sends the job. The supervisor reads it first thing; the
// deadline only bounds one stopped by someone else.
func (g *superGroup) writeSpec(spec superSpec) error {
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return g.write(append(b, '\n'), 10*time.Second)
}

// write sends b to the supervisor, waiting at most d while its socket is
// full (fdio.WriteWithin): a deadline set before the write also counted
// the agent's own wait for a CPU, and a stop's SIGTERM that failed so
// made Shutdown return without its SIGKILL.
func (g *superGroup) write(b []byte, d time.Duration) error {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	return fdio.WriteWithin(g.f, g.raw, b, d)
}

// signal asks the supervisor to deliver sig to program i.
func (g *superGroup) signal(i int, sig syscall.Signal) error {
	return g.write([]byte("sig "+strconv.Itoa(i)+" "+strconv.Itoa(int(sig))+"\n"), time.Second)
}

// signalAll asks the supervisor to deliver sig to every program still
// running, in one line ("sig * N"): a job's stop reaches a host's ranks
// at once, not one write (and one wakeup of a busy agent) per rank.
func (g *superGroup) signalAll(sig syscall.Signal) error {
	return g.write([]byte("sig * "+strconv.Itoa(int(sig))+"\n"), time.Second)
}

// read takes the supervisor's reports until its end, then reaps it and
// settles every program whose end it did not report: the supervisor was
// killed, and took them with it. It closes gone last.
func (g *superGroup) read() {
	defer close(g.gone)
	br := bufio.NewReaderSize(g.f, 4096)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			break
		}
		g.report(strings.TrimSuffix(line, "\n"))
	}
	_ = g.cmd.Wait()
	g.f.Close()
	for _, p := range g.procs {
		s := p.sup
		select {
		case <-s.known:
		default:
			close(s.known)
		}
		select {
		case <-s.end:
		default:
			s.lost = true
			close(s.end)
		}
	}
}

// report handles one line of the supervisor's.
func (g *superGroup) report(line string) {
	kind, rest, _ := strings.Cut(line, " ")
	is, rest, _ := strings.Cut(rest, " ")
	i, err := strconv.Atoi(is)
	if err != nil || i < 0 || i >= len(g.procs) {
		return
	}
	s := g.procs[i].sup
	switch kind {
	case "pid":
		if s.pid == 0 && s.err == nil {
			s.pid, _ = strconv.Atoi(rest)
			close(s.known)
		}
	case "err":
		if s.pid == 0 && s.err == nil {
			cs, msg, _ := strings.Cut(rest, " ")
			s.code, _ = strconv.Atoi(cs)
			s.err = errors.New(msg)
			if s.code == 127 {
				s.err = notFound{s.err}
			} else {
				s.code = 126
			}
			close(s.known)
			g.ended.Add(1)
			close(s.end)
		}
	case "exit":
		if s.pid != 0 && !s.ended() {
			ws, _ := strconv.ParseUint(rest, 10, 32)
			s.ws = syscall.WaitStatus(ws)
			g.ended.Add(1)
			close(s.end)
		}
	}
}

func (s *supervised) ended() bool {
	select {
	case <-s.end:
		return true
	default:
		return false
	}
}

// last reports whether every program of the group has ended (or never
// started).
func (g *superGroup) last() bool { return int(g.ended.Load()) >= len(g.procs) }

// result is the program's exit code and signal, as a child of the agent's
// own would have them.
func (s *supervised) result() (int, syscall.Signal) {
	switch {
	case s.err != nil:
		return s.code, 0
	case s.lost:
		return osproc.SignalCode(syscall.SIGKILL), syscall.SIGKILL
	}
	return osproc.ExitCode(s.ws)
}
