package facts

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

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
	var out []wire.Route
	route, done := newRouter()
	defer done()
	for _, peer := range o.Peers {
		ips := []net.IP{net.ParseIP(peer)}
		if ips[0] == nil {
			var err error
			ips, err = lookup(ctx, peer)
			if err != nil {
				out = append(out, wire.Route{Peer: peer, Err: fmt.Sprintf("resolve %s: %v", peer, err)})
				continue
			}
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
