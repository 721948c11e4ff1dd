package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Conn is one end of a session. Send methods are safe for concurrent use;
// Recv must be called from one goroutine.
type Conn struct {
	rwc io.ReadWriteCloser
	r   *reader   // nil on a MsgStream
	ms  MsgStream // rwc, when it carries whole messages

	mu  sync.Mutex // serialises a MsgStream's messages
	hdr [5]byte

	// Frames sent while another sender's Write is under way are gathered
	// and go out together in the next one (group commit): one SSH packet,
	// one encryption and one TCP send for a burst of frames from many
	// senders (a relay forwarding its children's frames, the launcher's
	// dials through one relay) where each frame was one. Every sender
	// still returns once its frame is written, or its Write failed.
	g gather

	rerr error // a framing violation: every later Recv returns it
}

// NewConn wraps a stream (an SSH channel, stdin/stdout, a socket). On a
// MsgStream it frames nothing: messages go and come whole.
func NewConn(rwc io.ReadWriteCloser) *Conn {
	if ms, ok := rwc.(MsgStream); ok {
		return &Conn{rwc: rwc, ms: ms}
	}
	c := &Conn{rwc: rwc, r: newReader(rwc)}
	c.g.cond.L = &c.g.mu
	return c
}

// MsgStream is a stream that carries whole messages within the process
// (the launcher's session with a host behind a relay of the agent tree,
// whose frames arrive in its relay's envelopes): a Conn on one hands them
// over as they are, with no read buffer of its own and no framing into
// bytes and back. SendMsg may use m.Payload only until it returns;
// RecvMsg's message belongs to the caller (Release included). The limits
// of Recv and Send hold as on any stream.
type MsgStream interface {
	io.ReadWriteCloser
	SendMsg(m Msg) error
	RecvMsg() (Msg, error)
}

// Close closes the underlying stream.
func (c *Conn) Close() error { return c.rwc.Close() }

// Send encodes v as JSON and writes one frame. v may be nil for kinds
// without payload.
func (c *Conn) Send(k Kind, v any) error {
	e, err := Encode(k, v)
	if err != nil {
		return err
	}
	return c.SendEncoded(e)
}

// Encoded is a message encoded once, for sending on many connections.
type Encoded struct {
	kind    Kind
	payload []byte
}

// Encode encodes v as Send would.
func Encode(k Kind, v any) (Encoded, error) {
	var p []byte
	if v != nil {
		var err error
		if p, err = json.Marshal(v); err != nil {
			return Encoded{}, fmt.Errorf("wire: encode %s: %w", k, err)
		}
	}
	return Encoded{kind: k, payload: p}, nil
}

// Payload is e's encoded payload (shared: do not modify it).
func (e Encoded) Payload() []byte { return e.payload }

// SendEncoded writes one frame of e; it is Send of e's value.
func (c *Conn) SendEncoded(e Encoded) error {
	return c.write(e.kind, nil, e.payload)
}

// SendOutput writes an output frame: rank output, whole lines.
func (c *Conn) SendOutput(rank int, s Stream, data []byte) error {
	var h [5]byte
	binary.BigEndian.PutUint32(h[:4], uint32(rank))
	h[4] = byte(s)
	return c.write(KindOutput, h[:], data)
}

// SendStdin writes stdin bytes for a rank; empty data means EOF.
func (c *Conn) SendStdin(rank int, data []byte) error {
	var h [4]byte
	binary.BigEndian.PutUint32(h[:], uint32(rank))
	return c.write(KindStdin, h[:], data)
}

// Hold makes the frames sent on c from now on wait, their senders
// returning at once (nil, or the failure of a write before), until the
// matching Release writes them in as few Writes as they fit (one, up to
// 256 KiB): a burst of small frames for many hosts through one stream
// (a relay's links, its children's starts) then costs one packet and
// system call, not one each. Holds nest; frames still go out in the
// order sent, and a frame sent alone (over 256 KiB) writes the held ones
// first. Hold and Release are for one goroutine's burst, released within
// it: a frame held is not written meanwhile, so whoever waits on an
// answer to it waits for the Release. On a message stream they do
// nothing (its writes are its own).
func (c *Conn) Hold() {
	if c.ms == nil {
		c.g.hold()
	}
}

// Release ends a Hold; at the last, it writes the frames held and
// returns the result of their write.
func (c *Conn) Release() error {
	if c.ms != nil {
		return nil
	}
	return c.g.release(c.rwc)
}

func (c *Conn) write(k Kind, sub, p []byte) error {
	n := len(sub) + len(p)
	if err := checkFrame(k, int64(n)); err != nil {
		return err
	}
	if c.ms != nil {
		return c.writeMsg(k, sub, p)
	}
	if 5+n <= pooledMax {
		return c.g.frame(c.rwc, k, sub, p)
	}
	// Only frames of very long lines are written in pieces, alone.
	return c.g.alone(func() error {
		c.hdr[0] = byte(k)
		binary.BigEndian.PutUint32(c.hdr[1:], uint32(n))
		if _, err := c.rwc.Write(c.hdr[:]); err != nil {
			return err
		}
		if len(sub) > 0 {
			if _, err := c.rwc.Write(sub); err != nil {
				return err
			}
		}
		_, err := c.rwc.Write(p)
		return err
	}, c.rwc)
}

// writeMsg hands a MsgStream one message, sub and p joined in a pooled
// buffer when there is a sub-header.
func (c *Conn) writeMsg(k Kind, sub, p []byte) error {
	if len(sub) == 0 {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.ms.SendMsg(Msg{Kind: k, Payload: p})
	}
	bp := getBuf(len(sub) + len(p))
	buf := append(append(*bp, sub...), p...)
	c.mu.Lock()
	err := c.ms.SendMsg(Msg{Kind: k, Payload: buf})
	c.mu.Unlock()
	*bp = buf
	putBuf(bp)
	return err
}

// Msg is one received frame.
type Msg struct {
	Kind    Kind
	Payload []byte

	buf *[]byte // the pooled buffer Payload lies in, for Release
}

// Release hands an output frame's buffer back for a later Recv to reuse:
// after it, neither Payload nor anything Output returned from it may be
// used. Calling it is optional (without it the buffer is garbage, as for
// any other frame), and at most once per received frame; the launcher
// calls it after each output frame, which saves an allocation of up to
// 64 KiB per frame.
func (m *Msg) Release() {
	if m.buf != nil {
		putBuf(m.buf)
		m.buf, m.Payload = nil, nil
	}
}

// pooledMax is the largest frame (header included) written from a pooled
// buffer, and the largest output payload received into one: an output
// pump's frame is at most 64 KiB of lines, and a frame built in one
// buffer goes out in one Write.
const pooledMax = 256 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10+16); return &b }}

// getBuf returns an empty pooled buffer with room for n bytes.
func getBuf(n int) *[]byte {
	bp := bufPool.Get().(*[]byte)
	if cap(*bp) < n {
		*bp = make([]byte, 0, n)
	}
	*bp = (*bp)[:0]
	return bp
}

func putBuf(bp *[]byte) {
	if cap(*bp) <= pooledMax {
		bufPool.Put(bp)
	}
}

// Recv reads the next frame. The payload is a fresh slice the caller
// owns, except that an output frame's may lie in a pooled buffer that the
// caller may hand back with Release once done with it.
//
// A frame of an unknown kind or longer than its kind's Limit is a
// *FrameError: Recv answers it with an Error frame naming the kind and
// the size (best effort), and returns it from then on, since the stream
// cannot be read past it. The payload buffer grows as bytes arrive, never
// to the announced length up front.
func (c *Conn) Recv() (Msg, error) {
	if c.rerr != nil {
		return Msg{}, c.rerr
	}
	if c.ms != nil {
		return c.recvMsg()
	}
	var h [5]byte
	if _, err := io.ReadFull(c.r, h[:]); err != nil {
		return Msg{}, err
	}
	k, n := Kind(h[0]), binary.BigEndian.Uint32(h[1:])
	if err := checkFrame(k, int64(n)); err != nil {
		c.rerr = err
		_ = c.Send(KindError, Error{Msg: err.Error()})
		return Msg{}, err
	}
	if k == KindOutput && n <= pooledMax {
		bp := getBuf(int(n))
		p := (*bp)[:n]
		if m, err := io.ReadFull(c.r, p); err != nil {
			putBuf(bp)
			return Msg{}, fmt.Errorf("wire: short %s frame (%d of %d bytes): %w", k, m, n, err)
		}
		*bp = p
		return Msg{Kind: k, Payload: p, buf: bp}, nil
	}
	p, err := readPayload(c.r, int(n))
	if err != nil {
		return Msg{}, fmt.Errorf("wire: short %s frame (%d of %d bytes): %w", k, len(p), n, err)
	}
	return Msg{Kind: k, Payload: p}, nil
}

// MsgPoller is a MsgStream that can be asked for a message without
// waiting (PollMsg: ok false and no error when none waits), so that a
// reader told that messages wait can drain it instead of a goroutine
// blocking on it for the life of the session.
type MsgPoller interface {
	MsgStream
	PollMsg() (m Msg, ok bool, err error)
}

// ErrNoPoll is Poll's error on a Conn whose stream is not a MsgPoller.
var ErrNoPoll = errors.New("wire: the stream cannot be polled")

// Poll is Recv without the wait, on a Conn over a MsgPoller: ok is false
// (and err nil) when no message waits. From the Recv goroutine only:
// Recv and Poll are one reader.
func (c *Conn) Poll() (Msg, bool, error) {
	if c.rerr != nil {
		return Msg{}, false, c.rerr
	}
	p, ok := c.ms.(MsgPoller)
	if !ok {
		return Msg{}, false, ErrNoPoll
	}
	m, ok, err := p.PollMsg()
	if err != nil || !ok {
		return Msg{}, false, err
	}
	m, err = c.checkMsg(m)
	return m, err == nil, err
}

// recvMsg is Recv on a MsgStream, with its checks.
func (c *Conn) recvMsg() (Msg, error) {
	m, err := c.ms.RecvMsg()
	if err != nil {
		return Msg{}, err
	}
	return c.checkMsg(m)
}

// checkMsg holds a message from a MsgStream to its kind's limit, as Recv
// does a frame.
func (c *Conn) checkMsg(m Msg) (Msg, error) {
	if err := checkFrame(m.Kind, int64(len(m.Payload))); err != nil {
		m.Release()
		c.rerr = err
		_ = c.Send(KindError, Error{Msg: err.Error()})
		return Msg{}, err
	}
	return m, nil
}

// firstChunk is the most a reader allocates for a payload before its
// bytes arrive; larger payloads double the buffer as they come in.
const firstChunk = 256 << 10

// readPayload reads n bytes, allocating no more than twice what arrived
// (at least firstChunk) and never more than n.
func readPayload(r io.Reader, n int) ([]byte, error) {
	if n <= firstChunk {
		p := make([]byte, n)
		m, err := io.ReadFull(r, p)
		return p[:m], err
	}
	p := make([]byte, 0, firstChunk)
	for len(p) < n {
		if len(p) == cap(p) {
			nb := make([]byte, len(p), min(2*cap(p), n))
			copy(nb, p)
			p = nb
		}
		m, err := r.Read(p[len(p):cap(p)])
		p = p[:len(p)+m]
		if err != nil && len(p) < n {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return p, err
		}
	}
	return p, nil
}

// Decode unmarshals a JSON payload into v.
func (m Msg) Decode(v any) error {
	if err := json.Unmarshal(m.Payload, v); err != nil {
		return fmt.Errorf("wire: decode %s: %w", m.Kind, err)
	}
	return nil
}

// Exits decodes an exit frame: one Exit, or the JSON array of several
// that an agent told Hello.BatchExits sends for exits that waited
// together.
func (m Msg) Exits() ([]Exit, error) {
	if m.Kind != KindExit {
		return nil, fmt.Errorf("wire: %s frame is not an exit", m.Kind)
	}
	if p := bytes.TrimLeft(m.Payload, " \t\r\n"); len(p) > 0 && p[0] == '[' {
		var xs []Exit
		if err := m.Decode(&xs); err != nil {
			return nil, err
		}
		if len(xs) == 0 {
			return nil, fmt.Errorf("wire: decode %s: an empty batch", m.Kind)
		}
		return xs, nil
	}
	var x Exit
	if err := m.Decode(&x); err != nil {
		return nil, err
	}
	return []Exit{x}, nil
}

// Output splits an output frame: a rank, stdout or stderr, the bytes.
func (m Msg) Output() (rank int, s Stream, data []byte, err error) {
	if m.Kind != KindOutput || len(m.Payload) < outputHeader {
		return 0, 0, nil, fmt.Errorf("wire: malformed output frame (%s, %d bytes)", m.Kind, len(m.Payload))
	}
	s = Stream(m.Payload[4])
	if s != Stdout && s != Stderr {
		return 0, 0, nil, fmt.Errorf("wire: malformed output frame: %s", s)
	}
	return int(binary.BigEndian.Uint32(m.Payload)), s, m.Payload[outputHeader:], nil
}

// Stdin splits a stdin frame.
func (m Msg) Stdin() (rank int, data []byte, err error) {
	if m.Kind != KindStdin || len(m.Payload) < stdinHeader {
		return 0, nil, fmt.Errorf("wire: malformed stdin frame (%s, %d bytes)", m.Kind, len(m.Payload))
	}
	return int(binary.BigEndian.Uint32(m.Payload)), m.Payload[stdinHeader:], nil
}

// VersionError says the two sides speak different protocol versions.
type VersionError struct {
	Ours, Theirs int
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("protocol version mismatch: this side speaks %d, the peer speaks %d (use the same gangway release on the launcher and every agent)", e.Ours, e.Theirs)
}
