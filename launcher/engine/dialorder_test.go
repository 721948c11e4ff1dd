package engine

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// chainDialer dials through relays as the agent tree does (DialAfter is
// the host's relay), fails every attempt (not for good), and records
// when each attempt began and ended.
type chainDialer struct {
	relay map[string]string // host -> its relay
	mu    sync.Mutex
	began map[string]int // host -> attempts begun
	ended map[string]int // host -> attempts ended
	early []string       // hosts whose first attempt began before their relay's first ended
}

func (d *chainDialer) DialAfter(h hostfile.Host) (hostfile.Host, bool) {
	r, ok := d.relay[h.Name]
	return hostfile.Host{Name: r}, ok
}

func (d *chainDialer) Dial(ctx context.Context, h hostfile.Host) (io.ReadWriteCloser, string, error) {
	d.mu.Lock()
	if r, ok := d.relay[h.Name]; ok && r != "nowhere" && d.began[h.Name] == 0 && d.ended[r] == 0 {
		d.early = append(d.early, h.Name)
	}
	d.began[h.Name]++
	d.mu.Unlock()
	time.Sleep(5 * time.Millisecond)
	d.mu.Lock()
	d.ended[h.Name]++
	d.mu.Unlock()
	return nil, "", transport.Unreachable(errors.New(h.Name + ": connection refused"))
}

// TestDialOrder: a host behind a relay is first dialed once its relay's
// first attempt has ended, not at once (where it held a goroutine waiting
// for the relay), and every host is still tried.
func TestDialOrder(t *testing.T) {
	hosts := []hostfile.Host{{Name: "r0"}, {Name: "r1"}, {Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}, {Name: "e"}}
	d := &chainDialer{
		relay: map[string]string{"a": "r0", "b": "r0", "c": "r1", "d": "a", "e": "nowhere"},
		began: map[string]int{}, ended: map[string]int{},
	}
	roots, after := dialOrder(hosts, transport.Dialers{Remote: d})
	if want := []int{0, 1, 6}; !slices.Equal(roots, want) {
		t.Errorf("roots %v, want %v (e's relay is not a host of the job)", roots, want)
	}
	if !slices.Equal(after[0], []int{2, 3}) || !slices.Equal(after[1], []int{4}) || !slices.Equal(after[2], []int{5}) {
		t.Errorf("after %v", after)
	}
	hello := func(int, map[string]string) wire.Hello { return wire.Hello{} }
	_, err := dialAll(context.Background(), zap.NewNop(), nil, hosts, transport.Dialers{Remote: d}, hello, dialWait{timeout: 2 * time.Second})
	if err == nil {
		t.Fatal("dialAll reached hosts that refuse every attempt")
	}
	if len(d.early) > 0 {
		t.Errorf("dialed before their relay's first attempt ended: %v", d.early)
	}
	for _, h := range hosts {
		if d.began[h.Name] == 0 {
			t.Errorf("%s was never tried", h.Name)
		}
	}
}

// prelinkDialer is a chainDialer whose transport starts each relayed
// host's login ahead of its dial (transport.Prelinker) and says it is in
// late, after the relay's attempt and any other host's.
type prelinkDialer struct {
	*chainDialer
	pmu      sync.Mutex
	readied  map[string]bool
	tooEarly []string // dialed before their ready
	calls    int      // Prelink calls: one per relay with children
	timers   sync.WaitGroup
}

func (d *prelinkDialer) Prelink(ctx context.Context, hs []hostfile.Host, ready func(k int)) {
	d.pmu.Lock()
	d.calls++
	d.pmu.Unlock()
	for k, h := range hs {
		d.timers.Go(func() {
			time.Sleep(30 * time.Millisecond) // after the others' dials have ended
			d.pmu.Lock()
			d.readied[h.Name] = true
			d.pmu.Unlock()
			ready(k)
		})
	}
}

func (d *prelinkDialer) Dial(ctx context.Context, h hostfile.Host) (io.ReadWriteCloser, string, error) {
	d.pmu.Lock()
	if _, relayed := d.relay[h.Name]; relayed && !d.readied[h.Name] {
		d.tooEarly = append(d.tooEarly, h.Name)
	}
	d.pmu.Unlock()
	return d.chainDialer.Dial(ctx, h)
}

// TestDialPrelink: where the transport starts a relayed host's login
// ahead of its dial, the dial starts only once the transport says it is
// ready, and the launch waits for it even when every other dial has
// ended by then: every host is still tried and named.
func TestDialPrelink(t *testing.T) {
	hosts := []hostfile.Host{{Name: "r0"}, {Name: "a"}, {Name: "b"}, {Name: "c"}}
	d := &prelinkDialer{chainDialer: &chainDialer{
		relay: map[string]string{"a": "r0", "b": "r0", "c": "a"},
		began: map[string]int{}, ended: map[string]int{},
	}, readied: map[string]bool{}}
	hello := func(int, map[string]string) wire.Hello { return wire.Hello{} }
	_, err := dialAll(context.Background(), zap.NewNop(), nil, hosts, transport.Dialers{Remote: d}, hello, dialWait{timeout: 2 * time.Second})
	if err == nil {
		t.Fatal("dialAll reached hosts that refuse every attempt")
	}
	d.mu.Lock()
	for _, h := range hosts {
		if d.began[h.Name] == 0 {
			t.Errorf("%s was never tried before the launch gave up", h.Name)
		}
		if !strings.Contains(err.Error(), h.Name+":") {
			t.Errorf("the failure does not name %s: %v", h.Name, err)
		}
	}
	d.mu.Unlock()
	d.timers.Wait()
	if len(d.tooEarly) > 0 {
		t.Errorf("dialed before the transport said they were ready: %v", d.tooEarly)
	}
	if d.calls != 2 {
		t.Errorf("%d Prelink calls, want 2 (r0's children together, then a's)", d.calls)
	}
}
