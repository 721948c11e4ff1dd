package transport

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
)

// TestClassifyRealErrors dials a port nobody listens on and a name that
// never resolves, and checks what the user reads and whether it is retried.
func TestClassifyRealErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var d net.Dialer
	_, err = d.DialContext(t.Context(), "tcp", addr)
	got := classify(addr, err)
	if !strings.HasPrefix(got.Error(), addr+": connection refused (is the agent running, and on this port?") || errors.Is(got, ErrPermanent) || !errors.Is(got, ErrUnreachable) {
		t.Errorf("refused: %v (permanent %v, unreachable %v)", got, errors.Is(got, ErrPermanent), errors.Is(got, ErrUnreachable))
	}
	got = classify("h:1", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.EHOSTUNREACH})
	if got.Error() != "h:1: no route to host (host down, or a firewall drops the port)" || !errors.Is(got, ErrUnreachable) {
		t.Errorf("no route: %v (unreachable %v)", got, errors.Is(got, ErrUnreachable))
	}
	got = classify("h:1", &net.DNSError{Err: "server misbehaving", Name: "h", IsTemporary: true})
	if got.Error() != `h:1: cannot resolve "h": server misbehaving` || !errors.Is(got, ErrUnreachable) || errors.Is(got, ErrPermanent) {
		t.Errorf("lookup failed: %v (unreachable %v)", got, errors.Is(got, ErrUnreachable))
	}
	_, err = d.DialContext(t.Context(), "tcp", "gw-no-such.invalid:22122")
	got = classify("gw-no-such.invalid:22122", err)
	if got.Error() != `gw-no-such.invalid:22122: no such host ("gw-no-such.invalid" does not resolve)` || !errors.Is(got, ErrPermanent) {
		t.Errorf("no such host: %v (permanent %v)", got, errors.Is(got, ErrPermanent))
	}
	got = classify("h:1", context.DeadlineExceeded)
	if !strings.HasPrefix(got.Error(), "h:1: no answer") || errors.Is(got, ErrPermanent) || errors.Is(got, ErrUnreachable) {
		t.Errorf("timeout: %v", got)
	}
}
