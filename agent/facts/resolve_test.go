package facts

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// TestResolvePeers: a peer name whose lookup fails (not found, or no
// name server answering) is looked up again until it resolves, within
// the wait; other failures are not, and IP literals are not looked up;
// without a wait, nothing is looked up again; the wait ends at its bound
// or with ctx.
func TestResolvePeers(t *testing.T) {
	nx := func(h string) error { return &net.DNSError{Err: "no such host", Name: h, IsNotFound: true} }
	type counts struct {
		mu sync.Mutex
		n  map[string]int
	}
	newLookup := func(appearsAfter int) (*counts, func(context.Context, string) ([]net.IP, error)) {
		c := &counts{n: map[string]int{}}
		return c, func(_ context.Context, h string) ([]net.IP, error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.n[h]++
			switch h {
			case "late":
				if c.n[h] > appearsAfter {
					return []net.IP{net.ParseIP("198.18.0.2")}, nil
				}
				return nil, nx(h)
			case "no server":
				if c.n[h] > appearsAfter {
					return []net.IP{net.ParseIP("198.18.0.4")}, nil
				}
				return nil, &net.DNSError{Err: "dial udp 10.255.255.53:53: connect: network is unreachable", Name: h, IsTemporary: true}
			case "broken":
				return nil, errors.New("not a lookup failure")
			case "up":
				return []net.IP{net.ParseIP("198.18.0.3")}, nil
			}
			return nil, nx(h)
		}
	}
	peers := []string{"up", "198.18.0.9", "late", "broken", "no server"}

	c, lookup := newLookup(2)
	got := resolvePeers(context.Background(), peers, lookup, 10*time.Second)
	if got[2].err != nil || len(got[2].ips) != 1 || got[2].ips[0].String() != "198.18.0.2" {
		t.Errorf("late: %v %v, want 198.18.0.2 once it appears", got[2].ips, got[2].err)
	}
	if got[0].err != nil || got[1].err != nil || got[1].ips[0].String() != "198.18.0.9" {
		t.Errorf("up and the literal: %+v %+v", got[0], got[1])
	}
	if got[3].err == nil {
		t.Errorf("broken resolved")
	}
	if got[4].err != nil || len(got[4].ips) != 1 {
		t.Errorf("no server: %v %v, want an address once it answers", got[4].ips, got[4].err)
	}
	if c.n["late"] != 3 || c.n["no server"] != 3 || c.n["up"] != 1 || c.n["broken"] != 1 || c.n["198.18.0.9"] != 0 {
		t.Errorf("lookups %v; want late and no server 3, up 1, broken 1, the literal none", c.n)
	}

	c, lookup = newLookup(2)
	got = resolvePeers(context.Background(), peers, lookup, 0)
	if !lookupFailed(got[2].err) || c.n["late"] != 1 {
		t.Errorf("no wait: late %v after %d lookups, want not found after 1", got[2].err, c.n["late"])
	}

	_, lookup = newLookup(1 << 30)
	start := time.Now()
	got = resolvePeers(context.Background(), []string{"late"}, lookup, 600*time.Millisecond)
	if !lookupFailed(got[0].err) {
		t.Errorf("never appears: %v, want not found", got[0].err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the wait of 600ms took %v", took)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got = resolvePeers(ctx, []string{"late"}, lookup, time.Hour)
	if !lookupFailed(got[0].err) {
		t.Errorf("ctx ended: %v, want not found", got[0].err)
	}
	if errors.Is(got[0].err, context.Canceled) {
		t.Errorf("ctx ended: the error is the context's, want the lookup's")
	}
}
