package wire

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"sync"
)

// Conn is one end of a session. Send methods are safe for concurrent use;
// Recv must be called from one goroutine.
type Conn struct {
	rwc io.ReadWriteCloser
	r   *bufio.Reader

	mu  sync.Mutex // serialises writes so frames never interleave
	hdr [5]byte

	rerr error // a framing violation: every later Recv returns it
}

// NewConn wraps a stream (an SSH channel, stdin/stdout, a socket).
func NewConn(rwc io.ReadWriteCloser) *Conn {
	return &Conn{rwc: rwc, r: bufio.NewReaderSize(rwc, 64<<10)}
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

func (c *Conn) write(k Kind, sub, p []byte) error {
	n := len(sub) + len(p)
	if err := checkFrame(k, int64(n)); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hdr[0] = byte(k)
	binary.BigEndian.PutUint32(c.hdr[1:], uint32(n))
	// One Write per frame where it is cheap to build: small frames are
	// copied into one buffer so a stream transport sends one packet.
	if n <= 4096 {
		buf := make([]byte, 0, 5+n)
		buf = append(buf, c.hdr[:]...)
		buf = append(buf, sub...)
		buf = append(buf, p...)
		_, err := c.rwc.Write(buf)
		return err
	}
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
}

// Msg is one received frame.
type Msg struct {
	Kind    Kind
	Payload []byte
}

// Recv reads the next frame. The payload is a fresh slice the caller owns.
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
	p, err := readPayload(c.r, int(n))
	if err != nil {
		return Msg{}, fmt.Errorf("wire: short %s frame (%d of %d bytes): %w", k, len(p), n, err)
	}
	return Msg{Kind: k, Payload: p}, nil
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
