package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// The fabric self-test (launcher --selftest): before the job, the
// launcher has pairs of hosts stream bytes to each other over the
// network the ranks will use and reports the bandwidth of each pair.
//
// It drives the agents one step at a time with Selftest frames:
//
//   - SelftestListen: the agent opens a sink, a TCP listener on every
//     address of its host, that reads and counts what senders presenting
//     Token stream to it; it answers with the sink's port.
//   - SelftestSend: the agent connects to Target (a peer's sink), sends
//     the stream hello (StreamHello), and only when the peer answers with
//     SinkHello (a sink of the same self-test: no other listener can
//     answer it, so an agent never floods an address that is not one of
//     the job's hosts) streams at most Bytes for at most Within, then
//     half-closes and waits for the sink's count of what arrived. The
//     answer says how many bytes the sink counted and how long that took,
//     from the first byte to the count.
//   - SelftestClose: the agent closes its sink (no answer). A session's
//     end closes it too.
//
// Each Selftest but Close is answered with one SelftestResult carrying
// the same Op. An agent runs one send at a time per session; it refuses
// one over MaxSelftestBytes or MaxSelftestTime, and Facts.Selftest says
// which version of this it serves.

// SelftestVersion is the self-test protocol an agent serves
// (Facts.Selftest).
const SelftestVersion = 1

// Selftest operations.
const (
	SelftestListen = "listen"
	SelftestSend   = "send"
	SelftestClose  = "close"
)

// Bounds an agent holds a SelftestSend to, whatever the launcher asks.
const (
	MaxSelftestBytes = 4 << 30
	MaxSelftestTime  = 60 * time.Second
)

// SelftestTokenLen is the length of a self-test's token: 32 lower-case
// hex digits (128 random bits, the launcher's, one per self-test).
const SelftestTokenLen = 32

// Selftest is one step of the fabric self-test.
type Selftest struct {
	Op    string `json:"op"`    // SelftestListen, SelftestSend or SelftestClose
	Token string `json:"token"` // the self-test's secret, SelftestTokenLen hex digits
	// Target is a peer's sink, host:port with a literal IP address
	// (SelftestSend only).
	Target string `json:"target,omitempty"`
	// Bytes and Within bound the stream (SelftestSend only): it ends at
	// whichever comes first.
	Bytes  int64         `json:"bytes,omitempty"`
	Within time.Duration `json:"within,omitempty"`
}

// Validate checks a Selftest as an agent must before acting on it.
func (s Selftest) Validate() error {
	if err := checkToken(s.Token); err != nil {
		return err
	}
	switch s.Op {
	case SelftestListen, SelftestClose:
		if s.Target != "" || s.Bytes != 0 || s.Within != 0 {
			return fmt.Errorf("selftest %s: target, bytes and within are for send only", s.Op)
		}
		return nil
	case SelftestSend:
	default:
		return fmt.Errorf("selftest: unknown op %q (want listen, send or close)", s.Op)
	}
	host, port, err := net.SplitHostPort(s.Target)
	if err != nil {
		return fmt.Errorf("selftest send: target %q: %w", s.Target, err)
	}
	if net.ParseIP(host) == nil {
		return fmt.Errorf("selftest send: target %q: want a literal IP address", s.Target)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("selftest send: target %q: bad port", s.Target)
	}
	if s.Bytes < 1 || s.Bytes > MaxSelftestBytes {
		return fmt.Errorf("selftest send: %d bytes, want 1 to %d", s.Bytes, int64(MaxSelftestBytes))
	}
	if s.Within <= 0 || s.Within > MaxSelftestTime {
		return fmt.Errorf("selftest send: within %v, want more than 0 and at most %v", s.Within, MaxSelftestTime)
	}
	return nil
}

func checkToken(t string) error {
	if len(t) != SelftestTokenLen {
		return fmt.Errorf("selftest: token of %d characters, want %d hex digits", len(t), SelftestTokenLen)
	}
	for i := range len(t) {
		if c := t[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return errors.New("selftest: token is not lower-case hex")
		}
	}
	return nil
}

// SelftestResult answers a Selftest with the same Op.
type SelftestResult struct {
	Op   string `json:"op"`
	Port int    `json:"port,omitempty"` // listen: the sink's port
	// Target, Bytes and Took are a send's: the sink counted Bytes, and
	// Took ran from the first byte sent to the sink's count.
	Target string        `json:"target,omitempty"`
	Bytes  int64         `json:"bytes,omitempty"`
	Took   time.Duration `json:"took,omitempty"`
	Err    string        `json:"err,omitempty"`
}

// The stream between two agents: the sender's StreamHello, the sink's
// SinkHello, then the sender's bytes until it half-closes, then the
// sink's count (8 bytes, big-endian) of the bytes it read.
const (
	streamMagic = "gwself01"
	sinkMagic   = "gwsink01"
	// StreamHelloLen is the length of a sender's hello: the magic, the
	// token, the announced byte count (8 bytes, big-endian).
	StreamHelloLen = len(streamMagic) + SelftestTokenLen + 8
)

// SinkHello is the sink's answer to a valid stream hello.
var SinkHello = []byte(sinkMagic)

// StreamHello is a sender's hello for a stream of at most n bytes.
func StreamHello(token string, n int64) []byte {
	b := make([]byte, 0, StreamHelloLen)
	b = append(b, streamMagic...)
	b = append(b, token...)
	return binary.BigEndian.AppendUint64(b, uint64(n))
}

// ParseStreamHello reads a sender's hello: the token and the announced
// byte count, which must lie in 1..MaxSelftestBytes.
func ParseStreamHello(b []byte) (token string, n int64, err error) {
	if len(b) != StreamHelloLen || string(b[:len(streamMagic)]) != streamMagic {
		return "", 0, errors.New("selftest stream: not a gangway self-test hello")
	}
	token = string(b[len(streamMagic) : len(streamMagic)+SelftestTokenLen])
	if err := checkToken(token); err != nil {
		return "", 0, err
	}
	u := binary.BigEndian.Uint64(b[len(b)-8:])
	if u < 1 || u > MaxSelftestBytes {
		return "", 0, fmt.Errorf("selftest stream: %d bytes announced, want 1 to %d", u, int64(MaxSelftestBytes))
	}
	return token, int64(u), nil
}
