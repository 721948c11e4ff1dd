package agent

import (
	"context"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// The agent's side of the fabric self-test (wire/selftest.go): a sink
// that counts what the job's other agents stream to it, and a sender
// that streams to one peer's sink and times it.

// Bounds of the self-test streams, besides the launcher's Bytes and
// Within (which the wire bounds).
const (
	// selftestHandshake bounds the connect and the exchange of hellos.
	selftestHandshake = 5 * time.Second
	// selftestDrain is how long a sender waits for the sink's count
	// beyond the stream's Within: what the socket buffers still hold
	// must arrive first.
	selftestDrain = 10 * time.Second
	// maxSinkStreams is how many streams a sink reads at once; more are
	// closed at once. The launcher has each host in one stream at a time.
	maxSinkStreams = 4
	// selftestChunk is the size of each write and read.
	selftestChunk = 256 << 10
)

// sink is a self-test sink: a listener on every address of the host that
// reads the streams of senders presenting its token and answers each
// with the count of bytes it read.
type sink struct {
	ln    net.Listener
	token string
	slots chan struct{} // one per stream being read
	wg    sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // the streams being read, for close
	closed bool
}

// listenSink starts a sink for token on an ephemeral port.
func listenSink(token string) (*sink, error) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return nil, fmt.Errorf("selftest sink: %w", err)
	}
	s := &sink{ln: ln, token: token, slots: make(chan struct{}, maxSinkStreams), conns: map[net.Conn]struct{}{}}
	s.wg.Go(s.serve)
	return s, nil
}

// port is the sink's port.
func (s *sink) port() int { return s.ln.Addr().(*net.TCPAddr).Port }

func (s *sink) serve() {
	for {
		c, err := s.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			time.Sleep(10 * time.Millisecond) // out of fds, say: let them free
			continue
		}
		select {
		case s.slots <- struct{}{}:
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				c.Close()
				<-s.slots
				continue
			}
			s.conns[c] = struct{}{}
			s.mu.Unlock()
			s.wg.Go(func() {
				defer func() { <-s.slots }()
				s.read(c)
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
			})
		default:
			c.Close()
		}
	}
}

// read serves one stream: the hello, then the bytes, then the count. The
// whole stream is bounded by the longest send plus its drain.
func (s *sink) read(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(selftestHandshake + wire.MaxSelftestTime + selftestDrain))
	hello := make([]byte, wire.StreamHelloLen)
	if _, err := io.ReadFull(c, hello); err != nil {
		return
	}
	tok, n, err := wire.ParseStreamHello(hello)
	if err != nil || subtle.ConstantTimeCompare([]byte(tok), []byte(s.token)) != 1 {
		return
	}
	if _, err := c.Write(wire.SinkHello); err != nil {
		return
	}
	got, _ := io.CopyBuffer(io.Discard, io.LimitReader(c, n), make([]byte, selftestChunk))
	_, _ = c.Write(binary.BigEndian.AppendUint64(nil, uint64(got)))
}

// close stops the sink, cuts the streams it is reading and waits for
// its goroutines.
func (s *sink) close() {
	s.ln.Close()
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// selftestSend streams to one peer's sink as st asks (validated) and
// reports what the sink counted and how long it took.
func selftestSend(ctx context.Context, st wire.Selftest) wire.SelftestResult {
	res := wire.SelftestResult{Op: wire.SelftestSend, Target: st.Target}
	n, took, err := stream(ctx, st)
	res.Bytes, res.Took = n, took
	if err != nil {
		res.Err = err.Error()
	}
	return res
}

func stream(ctx context.Context, st wire.Selftest) (int64, time.Duration, error) {
	d := net.Dialer{Timeout: selftestHandshake}
	c, err := d.DialContext(ctx, "tcp", st.Target)
	if err != nil {
		return 0, 0, fmt.Errorf("connect: %w", err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	_ = c.SetDeadline(time.Now().Add(selftestHandshake))
	if _, err := c.Write(wire.StreamHello(st.Token, st.Bytes)); err != nil {
		return 0, 0, fmt.Errorf("hello: %w", err)
	}
	ack := make([]byte, len(wire.SinkHello))
	if _, err := io.ReadFull(c, ack); err != nil || string(ack) != string(wire.SinkHello) {
		return 0, 0, fmt.Errorf("%s is not a self-test sink of this job (no answer to the hello: %v)", st.Target, err)
	}
	t0 := time.Now()
	_ = c.SetDeadline(t0.Add(st.Within))
	buf := make([]byte, selftestChunk)
	for sent := int64(0); sent < st.Bytes; {
		m, err := c.Write(buf[:min(int64(len(buf)), st.Bytes-sent)])
		sent += int64(m)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			break // Within is up: what was sent is measured
		}
		if err != nil {
			return 0, time.Since(t0), fmt.Errorf("stream: %w", err)
		}
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return 0, time.Since(t0), fmt.Errorf("stream end: %w", err)
	}
	_ = c.SetDeadline(time.Now().Add(selftestDrain))
	var count [8]byte
	if _, err := io.ReadFull(c, count[:]); err != nil {
		return 0, time.Since(t0), fmt.Errorf("no count from the sink: %w", err)
	}
	return int64(binary.BigEndian.Uint64(count[:])), time.Since(t0), nil
}

// selftest acts on one validated Selftest step. A send runs off the
// loop (it takes up to its Within and a drain), one at a time: a second
// while one runs is refused in its answer.
func (s *session) selftest(ctx context.Context, st wire.Selftest) error {
	switch st.Op {
	case wire.SelftestListen:
		res := wire.SelftestResult{Op: st.Op}
		s.smu.Lock()
		if s.sink == nil {
			sk, err := listenSink(st.Token)
			if err != nil {
				res.Err = err.Error()
			} else {
				s.sink = sk
			}
		}
		if s.sink != nil {
			if s.sink.token != st.Token {
				res.Err = "selftest: a sink of another self-test is open"
			} else {
				res.Port = s.sink.port()
			}
		}
		s.smu.Unlock()
		return s.conn.Send(wire.KindSelftestResult, res)
	case wire.SelftestClose:
		s.closeSink()
		return nil
	}
	if !s.sending.TryLock() {
		return s.conn.Send(wire.KindSelftestResult, wire.SelftestResult{Op: st.Op, Target: st.Target, Err: "selftest: a send is already running"})
	}
	sctx, cancel := context.WithCancel(ctx)
	s.smu.Lock()
	s.stopSend = cancel
	s.smu.Unlock()
	s.waiters.Go(func() {
		res := selftestSend(sctx, st)
		cancel()
		// Over before its result leaves: the launcher's next step
		// follows the result at once, and may ask this host to send
		// again.
		s.sending.Unlock()
		_ = s.conn.Send(wire.KindSelftestResult, res)
	})
	return nil
}

// closeSink closes the self-test's sink, if open, and ends a send still
// running (the session's end does not wait for its bounds).
func (s *session) closeSink() {
	s.smu.Lock()
	sk, stop := s.sink, s.stopSend
	s.sink, s.stopSend = nil, nil
	s.smu.Unlock()
	if stop != nil {
		stop()
	}
	if sk != nil {
		sk.close()
	}
}
