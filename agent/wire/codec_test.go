package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
)

// pipeConn is a Conn reading from r and writing to w.
type pipeConn struct {
	io.Reader
	w io.Writer
}

func (p pipeConn) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p pipeConn) Close() error                { return nil }

func header(k Kind, n uint32) []byte {
	h := make([]byte, 5)
	h[0] = byte(k)
	binary.BigEndian.PutUint32(h[1:], n)
	return h
}

// TestRecvRefusesFrames: a frame over its kind's limit or of an unknown
// kind is refused from its header, with an error naming the kind and the
// size, answered with an Error frame, and every later Recv fails too.
func TestRecvRefusesFrames(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		is   error
		want string
	}{
		{"hello of 64 MiB", header(KindHello, 64<<20), ErrTooLarge, "hello frame too large: 67108864 bytes, the limit for hello is 16777216"},
		{"ready of 2 MiB", header(KindReady, 2<<20), ErrTooLarge, "ready frame too large: 2097152 bytes"},
		{"output over a line and header", header(KindOutput, outputHeader+MaxOutputData+1), ErrTooLarge, "output frame too large: 16777223 bytes, the limit for output is 16777222"},
		{"stdin of 4 GiB", header(KindStdin, 1<<32-1), ErrTooLarge, "stdin frame too large: 4294967295 bytes"},
		{"kind 0", header(0, 3), ErrUnknownKind, "wire: unknown frame kind 0 (3 bytes announced)"},
		{"kind 200", header(200, 0), ErrUnknownKind, "unknown frame kind 200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var back bytes.Buffer
			c := NewConn(pipeConn{bytes.NewReader(tc.in), &back})
			_, err := c.Recv()
			var fe *FrameError
			if !errors.Is(err, tc.is) || !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Recv: %v, want %v naming %q", err, tc.is, tc.want)
			}
			if _, err2 := c.Recv(); err2 != err {
				t.Errorf("second Recv: %v, want the same error", err2)
			}
			m, err := NewConn(pipeConn{&back, io.Discard}).Recv()
			var e Error
			if err != nil || m.Kind != KindError || m.Decode(&e) != nil || e.Msg != fe.Error() {
				t.Errorf("answer to the peer: %s %q %v, want an error frame saying %q", m.Kind, m.Payload, err, fe.Error())
			}
		})
	}
}

// TestRecvTruncated: a header or payload cut short is an error, not a
// frame.
func TestRecvTruncated(t *testing.T) {
	for name, in := range map[string][]byte{
		"header":        {byte(KindHello), 0, 0},
		"small payload": append(header(KindHello, 10), `{"ver`...),
		"big payload":   append(header(KindStart, 1<<20), make([]byte, 300<<10)...),
	} {
		_, err := NewConn(pipeConn{bytes.NewReader(in), io.Discard}).Recv()
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s cut short: %v, want unexpected EOF", name, err)
		}
	}
}

// TestRecvGrowsAsBytesArrive: a header announcing a large frame costs the
// reader only what the peer actually sent, and the whole frame arrives
// intact.
func TestRecvGrowsAsBytesArrive(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	payload := bytes.Repeat([]byte("0123456789abcdef"), (MaxOutputData+outputHeader)/16)
	got := make(chan Msg, 1)
	go func() {
		m, _ := NewConn(b).Recv()
		got <- m
	}()
	if _, err := a.Write(header(KindOutput, uint32(len(payload)))); err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(payload); off += 1 << 20 {
		if _, err := a.Write(payload[off:min(off+1<<20, len(payload))]); err != nil {
			t.Fatal(err)
		}
	}
	m := <-got
	if m.Kind != KindOutput || !bytes.Equal(m.Payload, payload) {
		t.Fatalf("got %s of %d bytes, want output of %d", m.Kind, len(m.Payload), len(payload))
	}
}

func TestReadPayloadAllocation(t *testing.T) {
	// The peer announces 16 MiB and sends 1 KiB: the buffer is firstChunk.
	p, err := readPayload(bytes.NewReader(make([]byte, 1024)), 16<<20)
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(p) != 1024 || cap(p) != firstChunk {
		t.Fatalf("16 MiB announced, 1 KiB sent: len %d cap %d err %v; want 1024, %d, unexpected EOF", len(p), cap(p), err, firstChunk)
	}
	// 600 KiB sent of 16 MiB: the buffer doubled twice (1 MiB), no more.
	p, _ = readPayload(bytes.NewReader(make([]byte, 600<<10)), 16<<20)
	if len(p) != 600<<10 || cap(p) != 1<<20 {
		t.Fatalf("600 KiB of 16 MiB: len %d cap %d, want cap 1 MiB", len(p), cap(p))
	}
	// Never beyond the announced length.
	p, err = readPayload(bytes.NewReader(make([]byte, 2<<20)), 300<<10)
	if err != nil || len(p) != 300<<10 || cap(p) != 300<<10 {
		t.Fatalf("300 KiB frame: len %d cap %d err %v", len(p), cap(p), err)
	}
}

// TestSendRefusesFrames: a sender cannot write what a reader would refuse,
// and learns why.
func TestSendRefusesFrames(t *testing.T) {
	c := NewConn(pipeConn{strings.NewReader(""), io.Discard})
	if err := c.Send(KindReady, Error{Msg: strings.Repeat("x", MaxControl)}); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "ready frame too large") {
		t.Errorf("ready over 1 MiB: %v", err)
	}
	if err := c.Send(Kind(99), nil); !errors.Is(err, ErrUnknownKind) {
		t.Errorf("kind 99: %v", err)
	}
	if err := c.SendOutput(0, Stdout, make([]byte, MaxOutputData)); err != nil {
		t.Errorf("output of MaxOutputData: %v", err)
	}
	if err := c.SendOutput(0, Stdout, make([]byte, MaxOutputData+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("output over MaxOutputData: %v", err)
	}
	if err := c.SendStdin(0, make([]byte, MaxStdinData+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("stdin over MaxStdinData: %v", err)
	}
}

// TestEveryKindHasALimit: every named kind is known to the reader.
func TestEveryKindHasALimit(t *testing.T) {
	for k := range kindNames {
		if Limit(k) == 0 {
			t.Errorf("%s has no limit: the reader would refuse it", k)
		}
	}
	last := Kind(0)
	for k := range kindNames {
		last = max(last, k)
	}
	if Limit(last+1) != 0 {
		t.Errorf("kind %d after the last has a limit", last+1)
	}
}

func TestOutputStdinDecode(t *testing.T) {
	for _, tc := range []struct {
		m    Msg
		want string
	}{
		{Msg{Kind: KindOutput, Payload: []byte{0, 0, 0, 1}}, "malformed output frame (output, 4 bytes)"},
		{Msg{Kind: KindOutput, Payload: []byte{0, 0, 0, 1, 3}}, "malformed output frame: stream(3)"},
		{Msg{Kind: KindStdin, Payload: []byte{0, 0, 1}}, "malformed stdin frame (stdin, 3 bytes)"},
		{Msg{Kind: KindExit, Payload: []byte{0, 0, 0, 1, 1}}, "malformed output frame (exit, 5 bytes)"},
	} {
		var err error
		if tc.m.Kind == KindStdin {
			_, _, err = tc.m.Stdin()
		} else {
			_, _, _, err = tc.m.Output()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: %v, want %q", tc.m.Kind, tc.m.Payload, err, tc.want)
		}
	}
}

// countingWriter records the size of every Write.
type countingWriter struct {
	bytes.Buffer
	writes []int
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.writes = append(w.writes, len(b))
	return w.Buffer.Write(b)
}

// TestFrameOneWrite: a frame up to pooledMax goes to the stream in one
// Write (an SSH channel sends each Write as its own packets), a larger
// one in pieces; every frame reads back intact, output frames through
// pooled buffers that Release hands back for the next frames to reuse.
func TestFrameOneWrite(t *testing.T) {
	var w countingWriter
	c := NewConn(pipeConn{Reader: strings.NewReader(""), w: &w})
	sizes := []int{0, 1, 4096, 4097, 64 << 10, pooledMax - 10, pooledMax - 9, 1 << 20}
	var sent [][]byte
	for i, n := range sizes {
		data := bytes.Repeat([]byte{byte('a' + i)}, n)
		sent = append(sent, data)
		w.writes = nil
		if err := c.SendOutput(i, Stdout, data); err != nil {
			t.Fatal(err)
		}
		want := 1
		if 5+outputHeader+n > pooledMax {
			want = 3
		}
		if len(w.writes) != want {
			t.Errorf("output frame of %d bytes: %d writes %v, want %d", n, len(w.writes), w.writes, want)
		}
	}
	if err := c.Send(KindExit, Exit{Rank: 7, Code: 3}); err != nil {
		t.Fatal(err)
	}
	r := NewConn(pipeConn{Reader: &w.Buffer, w: io.Discard})
	for i, data := range sent {
		m, err := r.Recv()
		if err != nil {
			t.Fatal(err)
		}
		rank, s, got, err := m.Output()
		if err != nil || rank != i || s != Stdout || !bytes.Equal(got, data) {
			t.Fatalf("frame %d: rank %d %s %d bytes (%v), want rank %d stdout %d bytes", i, rank, s, len(got), err, i, len(data))
		}
		pooled := m.buf != nil
		if want := outputHeader+len(data) <= pooledMax; pooled != want {
			t.Errorf("frame %d (%d bytes): pooled %v, want %v", i, len(data), pooled, want)
		}
		m.Release()
		if pooled && (m.Payload != nil || m.buf != nil) {
			t.Errorf("frame %d: Release left the payload", i)
		}
	}
	m, err := r.Recv()
	var x Exit
	if err != nil || m.buf != nil || m.Decode(&x) != nil || x.Rank != 7 || x.Code != 3 {
		t.Errorf("exit frame after output: %+v %v (pooled %v)", x, err, m.buf != nil)
	}
	m.Release() // not pooled: a no-op
}

// TestSendEncoded: a message encoded once goes out on several
// connections byte for byte as Send writes it, and each end decodes it.
func TestSendEncoded(t *testing.T) {
	v := FenceDone{Seq: 7, Puts: map[string]string{"k": "v w", "x": ""}}
	var want bytes.Buffer
	if err := NewConn(pipeConn{strings.NewReader(""), &want}).Send(KindFenceDone, v); err != nil {
		t.Fatal(err)
	}
	e, err := Encode(KindFenceDone, v)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		var got bytes.Buffer
		if err := NewConn(pipeConn{strings.NewReader(""), &got}).SendEncoded(e); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("connection %d: SendEncoded wrote %q, Send %q", i, got.Bytes(), want.Bytes())
		}
		m, err := NewConn(pipeConn{&got, io.Discard}).Recv()
		if err != nil {
			t.Fatal(err)
		}
		var fd FenceDone
		if err := m.Decode(&fd); err != nil || m.Kind != KindFenceDone || fd.Seq != 7 || fd.Puts["k"] != "v w" || len(fd.Puts) != 2 {
			t.Fatalf("decoded %s %+v (%v)", m.Kind, fd, err)
		}
	}
	if _, err := Encode(KindFenceDone, func() {}); err == nil {
		t.Error("Encode of a func succeeded")
	}
}

// TestMsgExits: an exit frame holds one Exit, or (Hello.BatchExits) a
// JSON array of several; anything else is an error, naming the frame.
func TestMsgExits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kind    Kind
		payload string
		ranks   []int
		err     string
	}{
		{"one", KindExit, `{"rank":3,"code":1}`, []int{3}, ""},
		{"batch", KindExit, `[{"rank":0,"code":0},{"rank":7,"code":137,"signal":9}]`, []int{0, 7}, ""},
		{"batch after spaces", KindExit, " \n[{\"rank\":2,\"code\":0}]", []int{2}, ""},
		{"empty batch", KindExit, `[]`, nil, "an empty batch"},
		{"not JSON", KindExit, `[{"rank":`, nil, "wire: decode exit"},
		{"a number", KindExit, `5`, nil, "wire: decode exit"},
		{"another kind", KindDone, `{"rank":1}`, nil, "is not an exit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			xs, err := Msg{Kind: tc.kind, Payload: []byte(tc.payload)}.Exits()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ranks []int
			for _, x := range xs {
				ranks = append(ranks, x.Rank)
			}
			if !slices.Equal(ranks, tc.ranks) {
				t.Errorf("ranks %v, want %v", ranks, tc.ranks)
			}
		})
	}
}
