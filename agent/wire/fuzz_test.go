package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// FuzzRecv feeds arbitrary bytes to the frame reader (both the launcher
// and the agent read with it): it never panics, never returns a frame of
// an unknown kind or over its kind's limit, allocates no more than twice
// what arrived (or firstChunk), and what it returns is what a sender
// wrote: frames re-encoded and read again are the same.
func FuzzRecv(f *testing.F) {
	var seed bytes.Buffer
	c := NewConn(pipeConn{bytes.NewReader(nil), &seed})
	_ = c.Send(KindHello, Hello{Version: Version, JobID: "j", Host: "h", Peers: []string{"a", "b"}})
	_ = c.Send(KindGo, nil)
	_ = c.SendOutput(3, Stderr, []byte("line\n"))
	_ = c.SendStdin(0, nil)
	f.Add(seed.Bytes())
	f.Add(header(KindStart, 64<<20))
	f.Add(header(KindOutput, outputHeader+MaxOutputData))
	f.Add(append(header(KindStart, 400<<10), make([]byte, 1000)...))
	f.Add(header(250, 1))
	f.Add([]byte{byte(KindHello), 0, 0})
	f.Add(append(header(KindPing, 0), header(KindStdinAck, 0)...))
	f.Fuzz(func(t *testing.T, in []byte) {
		var back bytes.Buffer
		c := NewConn(pipeConn{bytes.NewReader(in), &back})
		var got []Msg
		for {
			m, err := c.Recv()
			if err != nil {
				var fe *FrameError
				if errors.As(err, &fe) && (Limit(fe.Kind) != fe.Limit || fe.Limit != 0 && fe.Size <= int64(fe.Limit)) {
					t.Fatalf("frame error %v for a frame within the protocol", err)
				}
				break
			}
			lim := Limit(m.Kind)
			if lim == 0 || len(m.Payload) > lim {
				t.Fatalf("returned %s of %d bytes (limit %d)", m.Kind, len(m.Payload), lim)
			}
			if cap(m.Payload) > max(len(m.Payload), firstChunk) && cap(m.Payload) > 2*len(m.Payload) {
				t.Fatalf("%s of %d bytes held in %d", m.Kind, len(m.Payload), cap(m.Payload))
			}
			got = append(got, m)
		}
		// Re-encode what was read and read it again.
		var enc bytes.Buffer
		w := NewConn(pipeConn{bytes.NewReader(nil), &enc})
		for _, m := range got {
			if err := w.write(m.Kind, nil, m.Payload); err != nil {
				t.Fatalf("re-encode %s: %v", m.Kind, err)
			}
		}
		r := NewConn(pipeConn{&enc, io.Discard})
		for i, want := range got {
			m, err := r.Recv()
			if err != nil || m.Kind != want.Kind || !bytes.Equal(m.Payload, want.Payload) {
				t.Fatalf("frame %d: read back %s %q %v, want %s %q", i, m.Kind, m.Payload, err, want.Kind, want.Payload)
			}
		}
	})
}

// FuzzDecodeOutputStdin: the binary output and stdin decoders never
// panic on any payload, refuse what they cannot split, and give back
// exactly what SendOutput and SendStdin wrote.
func FuzzDecodeOutputStdin(f *testing.F) {
	f.Add(uint8(KindOutput), []byte{0, 0, 0, 7, 1, 'h', 'i', '\n'})
	f.Add(uint8(KindOutput), []byte{0, 0, 0, 7, 9})
	f.Add(uint8(KindOutput), []byte{0xff, 0xff, 0xff, 0xff, 2})
	f.Add(uint8(KindStdin), []byte{0, 0, 0, 1})
	f.Add(uint8(KindStdin), []byte{0, 0, 1})
	f.Add(uint8(KindExit), []byte{})
	f.Fuzz(func(t *testing.T, kind uint8, payload []byte) {
		m := Msg{Kind: Kind(kind), Payload: payload}
		if rank, s, data, err := m.Output(); err == nil {
			if m.Kind != KindOutput || (s != Stdout && s != Stderr) || rank < 0 || len(data) != len(payload)-outputHeader {
				t.Fatalf("Output accepted %s %v: rank %d %s %d bytes", m.Kind, payload, rank, s, len(data))
			}
			var buf bytes.Buffer
			if err := NewConn(pipeConn{nil, &buf}).SendOutput(rank, s, data); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes()[5:], payload) {
				t.Fatalf("SendOutput(%d, %s, %q) = %v, want %v", rank, s, data, buf.Bytes()[5:], payload)
			}
		} else if m.Kind == KindOutput && len(payload) >= outputHeader && (payload[4] == 1 || payload[4] == 2) {
			t.Fatalf("Output refused a well-formed frame %v: %v", payload, err)
		}
		if rank, data, err := m.Stdin(); err == nil {
			if m.Kind != KindStdin || rank < 0 || len(data) != len(payload)-stdinHeader {
				t.Fatalf("Stdin accepted %s %v", m.Kind, payload)
			}
			var buf bytes.Buffer
			if err := NewConn(pipeConn{nil, &buf}).SendStdin(rank, data); err != nil {
				t.Fatal(err)
			}
			if binary.BigEndian.Uint32(buf.Bytes()[1:5]) != uint32(len(payload)) || !bytes.Equal(buf.Bytes()[5:], payload) {
				t.Fatalf("SendStdin(%d, %q) = %v, want payload %v", rank, data, buf.Bytes(), payload)
			}
		} else if m.Kind == KindStdin && len(payload) >= stdinHeader {
			t.Fatalf("Stdin refused a well-formed frame %v: %v", payload, err)
		}
	})
}

// FuzzMsgExits: an exit frame's payload, one Exit or a batch, never
// panics and never yields an empty list without an error.
func FuzzMsgExits(f *testing.F) {
	f.Add([]byte(`{"rank":3,"code":1}`))
	f.Add([]byte(`[{"rank":0,"code":0},{"rank":7,"code":137,"signal":9,"signal_name":"SIGKILL"}]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(" \t["))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		xs, err := Msg{Kind: KindExit, Payload: payload}.Exits()
		if err == nil && len(xs) == 0 {
			t.Fatalf("%q: no exits and no error", payload)
		}
	})
}

// FuzzMsgGathered: a gathered frame's payload never panics, and what
// decodes names each host once, with as many answers, each a JSON
// object, of a gathered kind.
func FuzzMsgGathered(f *testing.F) {
	f.Add([]byte(`{"kind":4,"hosts":[3,7],"answers":[{},{"err":"no such file"}]}`))
	f.Add([]byte(`{"kind":20,"hosts":[1],"answers":[{"results":[]}]}`))
	f.Add([]byte(`{"kind":4,"hosts":[3,3],"answers":[{},{}]}`))
	f.Add([]byte(`{"kind":4,"hosts":[3],"answers":[]}`))
	f.Add([]byte(`{"kind":4,"hosts":[3],"answers":[ null ]}`))
	f.Add([]byte(`{"kind":9,"hosts":[1],"answers":[{}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		g, err := Msg{Kind: KindGathered, Payload: payload}.Gathered()
		if err != nil {
			return
		}
		if !Gatherable(g.Kind) || len(g.Hosts) == 0 || len(g.Hosts) != len(g.Answers) {
			t.Fatalf("%q decoded to %+v", payload, g)
		}
		for _, a := range g.Answers {
			if !json.Valid(a) || a[0] != '{' {
				t.Fatalf("%q: answer %q is not a JSON object", payload, a)
			}
		}
		seen := map[int]bool{}
		for _, h := range g.Hosts {
			if h < 0 || seen[h] {
				t.Fatalf("%q: host %d twice or negative", payload, h)
			}
			seen[h] = true
		}
	})
}

// FuzzMsgEnds: an ends frame's payload never panics, and what decodes is
// not both self and done, names its hosts ascending, once each, not
// negative, and its spans in order and apart.
func FuzzMsgEnds(f *testing.F) {
	f.Add([]byte(`{"self":true,"last":true}`))
	f.Add([]byte(`{"done":true,"hosts":[3,9,10],"last":true}`))
	f.Add([]byte(`{"spans":[[33,64],[1057,1088]]}`))
	f.Add([]byte(`{"self":true,"stopped":8,"hosts":[2,5]}`))
	f.Add([]byte(`{"stopped":-3}`))
	f.Add([]byte(`{"self":true,"done":true}`))
	f.Add([]byte(`{"hosts":[4,4]}`))
	f.Add([]byte(`{"spans":[[5,3]]}`))
	f.Add([]byte(`{"spans":[[1,2],[3,4]]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		e, err := Msg{Kind: KindEnds, Payload: payload}.Ends()
		if err != nil {
			return
		}
		if e.Self && e.Done {
			t.Fatalf("%q: both self and done", payload)
		}
		if e.Stopped < 0 {
			t.Fatalf("%q: %d stopped", payload, e.Stopped)
		}
		last := -1
		for _, h := range e.Hosts {
			if h <= last {
				t.Fatalf("%q: host %d out of order", payload, h)
			}
			last = h
		}
		next := 0
		for _, s := range e.Spans {
			if s[0] < next || s[0] > s[1] {
				t.Fatalf("%q: span %v out of order", payload, s)
			}
			next = s[1] + 2
		}
	})
}
