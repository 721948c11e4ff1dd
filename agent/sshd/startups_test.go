package sshd

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestStartupCapDrop: sshd's MaxStartups decision, with the random
// number given. Below start nothing is refused; at start a connection is
// refused when r < rate; the probability rises linearly (integer
// percent, as sshd computes it) to 100 at full; from full on everything
// is refused.
func TestStartupCapDrop(t *testing.T) {
	sshd := StartupCap{Start: 10, Rate: 30, Full: 100}
	for _, tc := range []struct {
		c    StartupCap
		n, r int
		want bool
	}{
		{sshd, 0, 0, false},
		{sshd, 9, 0, false},
		{sshd, 10, 29, true},  // p = 30
		{sshd, 10, 30, false}, // p = 30
		{sshd, 55, 64, true},  // p = 30 + 70*45/90 = 65
		{sshd, 55, 65, false},
		{sshd, 99, 98, true}, // p = 30 + 70*89/90 = 99
		{sshd, 99, 99, false},
		{sshd, 100, 99, true},
		{sshd, 1000, 99, true},
		{StartupCap{Start: 10, Rate: 30, Full: 50}, 30, 64, true}, // p = 30 + 70*20/40 = 65
		{StartupCap{Start: 10, Rate: 30, Full: 50}, 30, 65, false},
		{StartupCap{Start: 1, Rate: 100, Full: 4}, 1, 99, true}, // rate 100: from start on, all
		{StartupCap{Start: 1, Rate: 100, Full: 4}, 0, 0, false},
		{StartupCap{Start: 4, Rate: 100, Full: 4}, 3, 0, false}, // a hard cap
		{StartupCap{Start: 4, Rate: 100, Full: 4}, 4, 99, true},
	} {
		if got := tc.c.drop(tc.n, tc.r); got != tc.want {
			t.Errorf("%v.drop(n=%d, r=%d) = %v, want %v", tc.c, tc.n, tc.r, got, tc.want)
		}
	}
}

// TestStartupCapRates: over every r, the refusals at n are sshd's
// percentage.
func TestStartupCapRates(t *testing.T) {
	c := StartupCap{Start: 10, Rate: 30, Full: 100}
	for n, want := range map[int]int{0: 0, 9: 0, 10: 30, 40: 53, 70: 76, 99: 99, 100: 100, 500: 100} {
		got := 0
		for r := range 100 {
			if c.drop(n, r) {
				got++
			}
		}
		if got != want {
			t.Errorf("n=%d: %d%% refused, want %d%%", n, got, want)
		}
	}
}

func TestParseStartupCap(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want StartupCap
		err  string
	}{
		{"10:30:100", StartupCap{10, 30, 100}, ""},
		{"100", StartupCap{100, 100, 100}, ""},
		{"5:100:5", StartupCap{5, 100, 5}, ""},
		{"10:30", StartupCap{}, "want N or start:rate:full"},
		{"10:x:100", StartupCap{}, `"x" is not a number`},
		{"0", StartupCap{}, "start must be at least 1"},
		{"10:0:100", StartupCap{}, "rate is a percentage"},
		{"10:101:100", StartupCap{}, "rate is a percentage"},
		{"10:30:5", StartupCap{}, "full must be at least start"},
	} {
		got, err := ParseStartupCap(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseStartupCap(%q): %v, want an error with %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseStartupCap(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		case tc.err == "" && got.String() != tc.in && !(tc.in == "5:100:5" && got.String() == "5"):
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.in)
		}
	}
}

// pipeConn is the agent's end of a connection whose client end the test
// holds.
func pipeConn(t *testing.T) (agentEnd, client net.Conn) {
	a, c := net.Pipe()
	t.Cleanup(func() { a.Close(); c.Close() })
	return a, c
}

// closed reports whether the agent closed its end of c (the client sees
// EOF).
func closed(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe)
}

// TestStartupsEvictSilent: at a cap, a connection that sent no version
// line makes room for a new one (the oldest such first, from the same
// source for the per-source cap); connections that spoke are never
// closed for room, and when only they are left the new one is refused.
// A finished handshake frees its slot.
func TestStartupsEvictSilent(t *testing.T) {
	s := newStartups(StartupLimits{MaxStartups: StartupCap{3, 100, 3}, MaxStartupsPerSource: StartupCap{2, 100, 2},
		VersionTimeout: time.Hour, LoginGraceTime: time.Hour})
	s.rand = func() int { return 0 }
	admit := func(src string) (*startupConn, net.Conn, *startupConn, string) {
		a, c := pipeConn(t)
		sc, ev, why := s.admit(a, src)
		return sc, c, ev, why
	}
	speak := func(sc *startupConn, c net.Conn) {
		go func() { _, _ = c.Write([]byte("SSH-2.0-test\r\n")) }()
		b := make([]byte, 64)
		for n := 0; n < 14; {
			k, err := sc.Read(b)
			if err != nil {
				t.Fatal(err)
			}
			n += k
		}
	}

	a1, c1, _, _ := admit("a")
	a2, c2, _, _ := admit("a")
	// Per source: the third from a closes a's oldest silent one.
	a3, c3, ev, why := admit("a")
	if a3 == nil || ev != a1 || why != "max-startups-per-source" || !closed(c1) {
		t.Fatalf("third from a: admitted %v, evicted a1 %v, why %q; want a1 evicted for the per-source cap", a3 != nil, ev == a1, why)
	}
	speak(a2, c2)
	speak(a3, c3)
	// a has two that spoke: a third from a is refused.
	if sc, _, ev, why := admit("a"); sc != nil || ev != nil || why != "max-startups-per-source" {
		t.Fatalf("from a with two that spoke: admitted %v, evicted %v, %q; want refused", sc != nil, ev != nil, why)
	}
	// In total: b's silent one is closed for c's.
	b1, cb1, _, _ := admit("b")
	if sc, _, ev, why := admit("c"); sc == nil || ev != b1 || why != "max-startups" || !closed(cb1) {
		t.Fatalf("from c at the total cap: admitted %v, evicted b1 %v, %q; want b1 evicted", sc != nil, ev == b1, why)
	}
	// A finished handshake frees its slot: from a again.
	s.done(a2)
	if sc, _, ev, _ := admit("a"); sc == nil || ev != nil {
		t.Fatalf("from a after a handshake ended: admitted %v, evicted %v", sc != nil, ev != nil)
	}
}
