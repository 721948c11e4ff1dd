package facts

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// Route is the way this host reaches one destination: what
// `ip route get DST` answers.
type Route struct {
	Iface   string // outgoing interface
	Src     net.IP // preferred source address, nil when the kernel gave none
	Gateway net.IP // next hop, nil when the destination is on-link
}

// peerRoutes resolves every peer in o.Peers and looks up the route to each
// of its addresses. Failures are recorded in the entry's Err.
func peerRoutes(ctx context.Context, o Options) []wire.Route {
	lookup := o.LookupIP
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]net.IP, error) {
			return net.DefaultResolver.LookupIP(ctx, "ip", host)
		}
	}
	resolved := resolvePeers(ctx, o.Peers, lookup, o.ResolveWait)
	var out []wire.Route
	route, done := newRouter()
	defer done()
	for k, peer := range o.Peers {
		ips, err := resolved[k].ips, resolved[k].err
		if err != nil {
			out = append(out, wire.Route{Peer: peer, Err: fmt.Sprintf("resolve %s: %v", peer, err)})
			continue
		}
		for _, ip := range ips {
			wr := wire.Route{Peer: peer, Addr: ip.String()}
			r, err := route(ip)
			if err != nil {
				wr.Err = err.Error()
			} else {
				wr.Iface = r.Iface
				if r.Src != nil {
					wr.Src = r.Src.String()
				}
				if r.Gateway != nil {
					wr.Gateway = r.Gateway.String()
				}
			}
			out = append(out, wr)
		}
	}
	return out
}

// lookupResult is one peer's addresses, or why it has none.
type lookupResult struct {
	ips []net.IP
	err error
}

// resolveRetry is how often resolvePeers looks a missing name up again.
const resolveRetry = 250 * time.Millisecond

// resolvePeers resolves each peer (an IP literal as itself). A name whose
// lookup fails (not found, or no answer from a name server: a pod's
// record is not there yet, or its DNS not either) is looked up again
// every resolveRetry for up to wait, or until ctx ends.
func resolvePeers(ctx context.Context, peers []string, lookup func(context.Context, string) ([]net.IP, error), wait time.Duration) []lookupResult {
	out := make([]lookupResult, len(peers))
	var missing []int
	for k, peer := range peers {
		if ip := net.ParseIP(peer); ip != nil {
			out[k].ips = []net.IP{ip}
			continue
		}
		out[k].ips, out[k].err = lookup(ctx, peer)
		if lookupFailed(out[k].err) {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 || wait <= 0 {
		return out
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(resolveRetry)
	defer tick.Stop()
	for len(missing) > 0 {
		select {
		case <-ctx.Done():
			return out
		case <-deadline.C:
			return out
		case <-tick.C:
		}
		still := missing[:0]
		for _, k := range missing {
			out[k].ips, out[k].err = lookup(ctx, peers[k])
			if lookupFailed(out[k].err) {
				still = append(still, k)
			}
		}
		missing = still
	}
	return out
}

// lookupFailed reports whether err is a failed name lookup.
func lookupFailed(err error) bool {
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// readSpeed reads <SysRoot>/sys/class/net/<name>/speed in Mb/s; 0 when
// unreadable or unknown (virtual links and links without carrier answer
// -1 or EINVAL).
func readSpeed(o Options, name string) int {
	b, err := os.ReadFile(o.Path("sys", "class", "net", name, "speed"))
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return 0
	}
	return n
}
