package agent

import (
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gangway-hpc/gangway/agent/wire"
)

const testToken = "00112233445566778899aabbccddeeff"

func sinkTarget(t *testing.T, token string) (*sink, string) {
	t.Helper()
	sk, err := listenSink(token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sk.close)
	return sk, net.JoinHostPort("127.0.0.1", strconv.Itoa(sk.port()))
}

// TestSelftestStream: a send to a sink of the same token is counted
// whole; one bounded by Within ends near it with what arrived.
func TestSelftestStream(t *testing.T) {
	_, target := sinkTarget(t, testToken)
	st := wire.Selftest{Op: wire.SelftestSend, Token: testToken, Target: target, Bytes: 32 << 20, Within: 10 * time.Second}
	res := selftestSend(t.Context(), st)
	if res.Err != "" || res.Bytes != st.Bytes || res.Took <= 0 {
		t.Fatalf("send: %+v", res)
	}
	t.Logf("loopback: %d bytes in %v (%.0f MB/s)", res.Bytes, res.Took, float64(res.Bytes)/res.Took.Seconds()/1e6)

	// 250 ms: a shorter bound can pass on a loaded machine before the
	// first write, which then fails with nothing sent; 4 GiB still takes
	// loopback longer.
	st.Bytes, st.Within = wire.MaxSelftestBytes, 250*time.Millisecond
	res = selftestSend(t.Context(), st)
	if res.Err != "" || res.Bytes <= 0 || res.Bytes >= st.Bytes {
		t.Fatalf("send bounded by time: %+v", res)
	}
	t.Logf("bounded by %v: %d bytes in %v", st.Within, res.Bytes, res.Took)
}

// TestSelftestSendOnlyToSinks: an agent streams nothing but its hello to
// a listener that is not a sink of the same self-test: another token's
// sink, or any other server.
func TestSelftestSendOnlyToSinks(t *testing.T) {
	_, other := sinkTarget(t, strings.Repeat("e", wire.SelftestTokenLen))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Int64
	done := make(chan struct{})
	go func() { // a server that reads everything and answers with junk
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			n, _ := io.Copy(io.Discard, c)
			got.Add(n)
			c.Close()
		}
	}()
	for _, target := range []string{other, ln.Addr().String()} {
		res := selftestSend(t.Context(), wire.Selftest{Op: wire.SelftestSend, Token: testToken, Target: target, Bytes: 64 << 20, Within: time.Second})
		if !strings.Contains(res.Err, "is not a self-test sink of this job") || res.Bytes != 0 {
			t.Errorf("send to %s: %+v", target, res)
		}
	}
	ln.Close()
	<-done
	if n := got.Load(); n != int64(wire.StreamHelloLen) {
		t.Errorf("the other server read %d bytes, want the hello alone (%d)", n, wire.StreamHelloLen)
	}
}

// TestSinkClose: closing a sink cuts a stream it is reading at once.
func TestSinkClose(t *testing.T) {
	sk, target := sinkTarget(t, testToken)
	c, err := net.Dial("tcp", target)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(wire.StreamHello(testToken, 1<<30)); err != nil {
		t.Fatal(err)
	}
	ack := make([]byte, len(wire.SinkHello))
	if _, err := io.ReadFull(c, ack); err != nil {
		t.Fatal(err)
	}
	sk.close() // would wait for the stream's deadline if it did not cut it
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(ack); err == nil {
		t.Error("stream still open after the sink closed")
	}
}

// TestSelftestSendCancelled: a send to a sink that stops reading ends
// when its context does (the session's end, SelftestClose), not at its
// Within.
func TestSelftestSendCancelled(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() { // a sink that greets and then reads nothing
		c, err := ln.Accept()
		if err != nil {
			return
		}
		hello := make([]byte, wire.StreamHelloLen)
		if _, err := io.ReadFull(c, hello); err == nil {
			_, _ = c.Write(wire.SinkHello)
		}
		accepted <- c
	}()
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(200*time.Millisecond, cancel)
	t0 := time.Now()
	res := selftestSend(ctx, wire.Selftest{Op: wire.SelftestSend, Token: testToken, Target: ln.Addr().String(), Bytes: wire.MaxSelftestBytes, Within: wire.MaxSelftestTime})
	took := time.Since(t0)
	(<-accepted).Close()
	if res.Err == "" || took > 10*time.Second {
		t.Fatalf("cancelled send: %+v after %v", res, took)
	}
	t.Logf("cancelled send ended after %v: %s", took.Round(time.Millisecond), res.Err)
}

// TestSelftestSendsBackToBack: a host asked to send again as soon as its
// last send's result is in takes the new send: its send is over before
// the result leaves (the launcher's next step follows the result at
// once, and was refused with "a send is already running" when the
// result left first).
func TestSelftestSendsBackToBack(t *testing.T) {
	c := serve(t, &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t)})
	c.send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "st", Host: "h0"})
	c.recv(wire.KindFacts, &wire.Facts{})
	c.send(wire.KindSelftest, wire.Selftest{Op: wire.SelftestListen, Token: testToken})
	var l wire.SelftestResult
	c.recv(wire.KindSelftestResult, &l)
	if l.Err != "" || l.Port == 0 {
		t.Fatalf("listen: %+v", l)
	}
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Port))
	for i := range 50 {
		c.send(wire.KindSelftest, wire.Selftest{Op: wire.SelftestSend, Token: testToken, Target: target, Bytes: 64 << 10, Within: time.Second})
		var r wire.SelftestResult
		c.recv(wire.KindSelftestResult, &r)
		if r.Err != "" {
			t.Fatalf("send %d, right after the last one's result: %s", i, r.Err)
		}
	}
}
