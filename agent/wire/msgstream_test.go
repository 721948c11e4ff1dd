package wire

import (
	"errors"
	"io"
	"testing"
)

// msgPipe is a MsgStream whose other end is the test: what a Conn sends
// lands in sent (copied: SendMsg may not keep the payload), what it
// receives comes from in.
type msgPipe struct {
	sent []Msg
	in   []Msg
}

func (p *msgPipe) Read([]byte) (int, error)  { return 0, errors.New("read of a message stream") }
func (p *msgPipe) Write([]byte) (int, error) { return 0, errors.New("write to a message stream") }
func (p *msgPipe) Close() error              { return nil }
func (p *msgPipe) SendMsg(m Msg) error {
	p.sent = append(p.sent, Msg{Kind: m.Kind, Payload: append([]byte(nil), m.Payload...)})
	return nil
}

// msgPoller is a msgPipe that can be polled.
type msgPoller struct{ msgPipe }

func (p *msgPoller) PollMsg() (Msg, bool, error) {
	if len(p.in) == 0 {
		return Msg{}, false, nil
	}
	m, err := p.RecvMsg()
	return m, err == nil, err
}

// TestConnPoll: Poll takes what waits without waiting, with Recv's
// limits; a stream that cannot be polled says so.
func TestConnPoll(t *testing.T) {
	if _, _, err := NewConn(&msgPipe{}).Poll(); !errors.Is(err, ErrNoPoll) {
		t.Errorf("Poll of a message stream without PollMsg: %v, want ErrNoPoll", err)
	}
	p := &msgPoller{msgPipe{in: []Msg{{Kind: KindPing}, {Kind: KindStart, Payload: make([]byte, Limit(KindStart)+1)}}}}
	c := NewConn(p)
	if m, ok, err := c.Poll(); !ok || err != nil || m.Kind != KindPing {
		t.Fatalf("Poll: %v %v %v", m.Kind, ok, err)
	}
	var fe *FrameError
	if _, ok, err := c.Poll(); ok || !errors.As(err, &fe) {
		t.Fatalf("Poll of an over-long start: %v %v, want a FrameError", ok, err)
	}
	if _, ok, err := c.Poll(); ok || !errors.As(err, &fe) {
		t.Errorf("Poll after a framing violation: %v %v, want it again", ok, err)
	}
	if _, ok, err := NewConn(&msgPoller{}).Poll(); ok || err != nil {
		t.Errorf("Poll with nothing waiting: %v %v", ok, err)
	}
}

func (p *msgPipe) RecvMsg() (Msg, error) {
	if len(p.in) == 0 {
		return Msg{}, io.EOF
	}
	m := p.in[0]
	p.in = p.in[1:]
	return m, nil
}

// TestConnMsgStream: a Conn on a MsgStream sends and receives whole
// messages (no read buffer, no framing), sub-headers joined to their
// payload, and holds the kinds' limits as on a byte stream.
func TestConnMsgStream(t *testing.T) {
	p := &msgPipe{in: []Msg{
		{Kind: KindHello, Payload: []byte(`{"job_id":"j"}`)},
		{Kind: KindFacts, Payload: make([]byte, Limit(KindFacts)+1)},
		{Kind: KindHello, Payload: []byte(`{}`)},
	}}
	c := NewConn(p)
	if c.r != nil {
		t.Error("a Conn on a message stream has a read buffer")
	}
	if err := c.Send(KindPing, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.SendOutput(3, Stderr, []byte("a line\n")); err != nil {
		t.Fatal(err)
	}
	if err := c.Send(KindHello, Hello{JobID: string(make([]byte, MaxJobControl))}); err == nil {
		t.Error("an over-long hello was sent")
	}
	if len(p.sent) != 2 || p.sent[0].Kind != KindPing || len(p.sent[0].Payload) != 0 || p.sent[1].Kind != KindOutput {
		t.Fatalf("sent %v", p.sent)
	}
	if rank, s, data, err := p.sent[1].Output(); err != nil || rank != 3 || s != Stderr || string(data) != "a line\n" {
		t.Errorf("output sent: rank %d stream %v %q %v", rank, s, data, err)
	}

	m, err := c.Recv()
	if err != nil || m.Kind != KindHello || string(m.Payload) != `{"job_id":"j"}` {
		t.Fatalf("Recv: %v %q %v", m.Kind, m.Payload, err)
	}
	_, err = c.Recv()
	var fe *FrameError
	if !errors.As(err, &fe) || fe.Kind != KindFacts {
		t.Fatalf("Recv of an over-long facts: %v, want a FrameError", err)
	}
	if last := p.sent[len(p.sent)-1]; last.Kind != KindError {
		t.Errorf("the over-long frame was answered with %v, want an error", last.Kind)
	}
	if _, err2 := c.Recv(); !errors.As(err2, &fe) {
		t.Errorf("Recv after a framing violation: %v, want it again", err2)
	}
}
