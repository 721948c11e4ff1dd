package launcher

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"syscall"
	"time"

	"go.uber.org/zap"

	"gangway/agent/wire"
)

// Exit codes of the launcher besides a rank's own.
const (
	ExitSetup   = 1   // hosts unreachable, a host refused the job, bad config
	ExitUsage   = 2   // command-line error
	ExitTimeout = 124 // --timeout expired (as timeout(1))
	ExitLost    = 255 // an agent died or its connection dropped mid-job
)

// RankError is one rank's failure.
type RankError struct {
	Rank     int
	Host     string
	Pid      int
	ExitCode int
	Signal   int
	Err      string
	Stderr   []string
}

func (e *RankError) Error() string {
	switch {
	case e.Err != "":
		return fmt.Sprintf("rank %d on %s: %s (exit code %d)", e.Rank, e.Host, e.Err, e.ExitCode)
	case e.Signal != 0:
		return fmt.Sprintf("rank %d on %s (pid %d) was killed by signal %d (%s), exit code %d", e.Rank, e.Host, e.Pid, e.Signal, sigName(e.Signal), e.ExitCode)
	default:
		return fmt.Sprintf("rank %d on %s (pid %d) exited with code %d", e.Rank, e.Host, e.Pid, e.ExitCode)
	}
}

func sigName(n int) string {
	for name, s := range map[string]syscall.Signal{"HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "ABRT": 6, "BUS": 7, "FPE": 8, "KILL": 9, "USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15} {
		if int(s) == n {
			return "SIG" + name
		}
	}
	return "signal " + strconv.Itoa(n)
}

type event struct {
	host int
	msg  wire.Msg
	err  error
}

// job is one running job; its state is owned by the goroutine in loop.
type job struct {
	cfg      Config
	log      *zap.Logger
	sessions []*session // hosts with ranks, index = session index
	ranks    []Rank
	hostOf   []int // rank -> session index
	out      *console
	events   chan event
	stdinAck chan struct{}

	exited   map[int]bool
	done     map[int]bool // hosts that sent Done or were lost
	failures []*RankError
	first    *RankError
	stopping bool
	killed   bool
	userSig  os.Signal
	timedOut bool
	lost     []string
	fences   map[int]*fence
}

type fence struct {
	arrived map[int]bool
	puts    map[string]string
}

// reader pumps one host's messages: output goes straight to the console
// from here (so one slow host never delays another's control messages),
// everything else to the job loop.
func (j *job) reader(s *session) {
	var sc scratch
	for {
		m, err := s.conn.Recv()
		if err != nil {
			j.events <- event{host: s.idx, err: err}
			return
		}
		if m.Kind == wire.KindStdinAck {
			select {
			case j.stdinAck <- struct{}{}:
			default:
			}
			continue
		}
		if m.Kind == wire.KindOutput {
			rank, st, data, err := m.Output()
			if err == nil {
				j.out.write(&sc, rank, st, data)
			}
			continue
		}
		j.events <- event{host: s.idx, msg: m}
		if m.Kind == wire.KindDone {
			return
		}
	}
}

func (j *job) broadcast(k wire.Kind, v any) {
	for i, s := range j.sessions {
		if j.done[i] {
			continue
		}
		if err := s.conn.Send(k, v); err != nil {
			j.log.Debug("send failed", zap.String("host", s.host.Name), zap.Stringer("kind", k), zap.Error(err))
		}
	}
}

func (j *job) stop(reason string) {
	if j.stopping {
		return
	}
	j.stopping = true
	j.log.Debug("stopping every rank", zap.String("reason", reason), zap.Duration("grace", j.cfg.KillGrace))
	j.broadcast(wire.KindStop, wire.Stop{Grace: j.cfg.KillGrace})
}

func (j *job) kill() {
	if j.killed {
		return
	}
	j.killed, j.stopping = true, true
	j.broadcast(wire.KindSignal, wire.Signal{Name: "KILL"})
}

func (j *job) fail(e *RankError) {
	e.Stderr = j.out.tail(e.Rank)
	j.failures = append(j.failures, e)
	// Failures after a signal or timeout are listed, not blamed.
	if j.first == nil && !j.stopping {
		j.first = e
		j.stop(e.Error())
	}
}

// loop runs the job after Go until every host is done.
func (j *job) loop(ctx context.Context, sigs <-chan os.Signal) {
	var timeout <-chan time.Time
	if j.cfg.Timeout > 0 {
		t := time.NewTimer(j.cfg.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var giveUp <-chan time.Time
	armGiveUp := func() {
		if giveUp == nil {
			giveUp = time.After(j.cfg.KillGrace + 15*time.Second)
		}
	}
	for len(j.done) < len(j.sessions) {
		if j.stopping {
			armGiveUp()
		}
		select {
		case ev := <-j.events:
			j.handle(ev)
		case sig := <-sigs:
			if j.userSig == nil {
				j.userSig = sig
				fmt.Fprintf(j.out.stderr, "launcher: got %v, stopping every rank (again to kill)\n", sig)
				j.stop("signal")
			} else {
				fmt.Fprintf(j.out.stderr, "launcher: got %v again, killing every rank\n", sig)
				j.kill()
			}
		case <-timeout:
			timeout = nil
			j.timedOut = true
			fmt.Fprintf(j.out.stderr, "launcher: --timeout %v expired, stopping every rank\n", j.cfg.Timeout)
			j.stop("timeout")
		case <-ctx.Done():
			j.stop("cancelled")
			ctx = context.Background()
		case <-giveUp:
			for i, s := range j.sessions {
				if !j.done[i] {
					j.lost = append(j.lost, s.host.Name+" (did not confirm the end of its ranks)")
					s.conn.Close()
				}
			}
			return
		}
	}
}

func (j *job) handle(ev event) {
	s := j.sessions[ev.host]
	name := s.host.Name
	if ev.err != nil {
		if j.done[ev.host] {
			return
		}
		j.done[ev.host] = true
		msg := fmt.Sprintf("lost the agent on %s: %v", name, ev.err)
		if ev.err == io.EOF {
			msg = fmt.Sprintf("lost the agent on %s: connection closed", name)
		}
		j.lost = append(j.lost, msg)
		for _, r := range j.ranks {
			if j.hostOf[r.Rank] == ev.host && !j.exited[r.Rank] {
				j.exited[r.Rank] = true
				j.fail(&RankError{Rank: r.Rank, Host: name, ExitCode: ExitLost, Err: msg})
			}
		}
		return
	}
	switch ev.msg.Kind {
	case wire.KindExit:
		var x wire.Exit
		if err := ev.msg.Decode(&x); err != nil {
			j.log.Warn("bad exit message", zap.String("host", name), zap.Error(err))
			return
		}
		j.exited[x.Rank] = true
		if x.Code != 0 || x.Err != "" {
			if x.Stopped && j.stopping {
				return // we asked for it
			}
			j.fail(&RankError{Rank: x.Rank, Host: name, Pid: x.Pid, ExitCode: x.Code, Signal: x.Signal, Err: x.Err})
		}
	case wire.KindAbort:
		var a wire.Abort
		if err := ev.msg.Decode(&a); err == nil {
			j.fail(&RankError{Rank: a.Rank, Host: name, ExitCode: a.Code, Err: fmt.Sprintf("called MPI_Abort with code %d %s", a.Code, a.Msg)})
		}
	case wire.KindFence:
		var f wire.Fence
		if err := ev.msg.Decode(&f); err != nil {
			return
		}
		fs := j.fences[f.Seq]
		if fs == nil {
			fs = &fence{arrived: map[int]bool{}, puts: map[string]string{}}
			j.fences[f.Seq] = fs
		}
		fs.arrived[ev.host] = true
		for k, v := range f.Puts {
			fs.puts[k] = v
		}
		if len(fs.arrived) == len(j.sessions) {
			j.broadcast(wire.KindFenceDone, wire.FenceDone{Seq: f.Seq, Puts: fs.puts})
			delete(j.fences, f.Seq)
		}
	case wire.KindDone:
		j.done[ev.host] = true
	case wire.KindError:
		var e wire.Error
		_ = ev.msg.Decode(&e)
		j.log.Error("agent error", zap.String("host", name), zap.String("err", e.Msg))
	case wire.KindStarted:
		var st wire.Started
		if j.cfg.ReportBindings && ev.msg.Decode(&st) == nil {
			ranks := make([]int, 0, len(st.Pids))
			for r := range st.Pids {
				ranks = append(ranks, r)
			}
			sort.Ints(ranks)
			for _, r := range ranks {
				b := st.Bindings[r]
				if b == "" {
					b = "not bound"
				}
				fmt.Fprintf(j.out.stderr, "launcher: rank %d on %s (pid %d): CPUs %s\n", r, name, st.Pids[r], b)
			}
		}
	default:
		j.log.Debug("unexpected message", zap.String("host", name), zap.Stringer("kind", ev.msg.Kind))
	}
}

// report prints the failure report and returns the exit code.
func (j *job) report(w io.Writer) int {
	code := 0
	switch {
	case j.first != nil:
		code = j.first.ExitCode
	case j.userSig != nil:
		code = 128 + int(j.userSig.(syscall.Signal))
	case j.timedOut:
		code = ExitTimeout
	case len(j.lost) > 0:
		code = ExitLost
	}
	if j.first != nil {
		fmt.Fprintf(w, "launcher: job failed: %v\n", j.first)
		for _, l := range j.first.Stderr {
			fmt.Fprintf(w, "launcher:   rank %d stderr: %s\n", j.first.Rank, l)
		}
		others := 0
		for _, f := range j.failures {
			if f != j.first {
				others++
				fmt.Fprintf(w, "launcher: also failed: %v\n", f)
			}
		}
		stopped := len(j.ranks) - 1 - others
		if stopped > 0 {
			fmt.Fprintf(w, "launcher: %d other ranks were stopped\n", stopped)
		}
	} else if len(j.failures) > 0 {
		for _, f := range j.failures {
			fmt.Fprintf(w, "launcher: also failed while stopping: %v\n", f)
		}
	}
	for _, l := range j.lost {
		fmt.Fprintf(w, "launcher: %s\n", l)
	}
	if code != 0 {
		fmt.Fprintf(w, "launcher: exit code %d\n", code)
	}
	return code
}

// pmiJob builds the PMI description shared by every host.
func pmiJob(jobID string, ranks []Rank) *wire.PMIJob {
	hostOf := make([]int, len(ranks))
	for _, r := range ranks {
		hostOf[r.Rank] = r.NodeRank
	}
	return &wire.PMIJob{KVSName: "kvs_" + jobID, Size: len(ranks), Mapping: wire.ProcessMapping(hostOf)}
}
