//go:build !linux

package facts

import (
	"errors"
	"fmt"
	"net"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// listNICs lists the network interfaces through net.Interfaces. Link type,
// master and speed are unknown on this platform; Up means up and running.
func listNICs(o Options) ([]wire.NIC, []error, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, nil, fmt.Errorf("list interfaces: %w", err)
	}
	var problems []error
	nics := make([]wire.NIC, 0, len(ifs))
	for _, i := range ifs {
		n := wire.NIC{
			Name:  i.Name,
			Index: i.Index,
			Up:    i.Flags&net.FlagUp != 0 && i.Flags&net.FlagRunning != 0,
			MTU:   i.MTU,
		}
		if i.Flags&net.FlagLoopback != 0 {
			n.Type = "loopback"
		}
		addrs, err := i.Addrs()
		if err != nil {
			problems = append(problems, fmt.Errorf("addresses of %s: %w", i.Name, err))
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				n.Addrs = append(n.Addrs, ipn.String())
			}
		}
		nics = append(nics, n)
	}
	return nics, problems, nil
}

// newRouter returns RouteTo; there is nothing to reuse without netlink.
func newRouter() (func(net.IP) (Route, error), func()) { return RouteTo, func() {} }

// RouteTo returns the interface and source address this host uses to reach
// dst. Without netlink it asks the kernel to bind a UDP socket toward dst
// (no packet is sent) and finds the interface holding the chosen source
// address; the gateway is unknown.
func RouteTo(dst net.IP) (Route, error) {
	c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: dst, Port: 9})
	if err != nil {
		return Route{}, fmt.Errorf("route to %s: %w", dst, err)
	}
	src := c.LocalAddr().(*net.UDPAddr).IP
	c.Close()
	ifs, err := net.Interfaces()
	if err != nil {
		return Route{}, fmt.Errorf("route to %s: %w", dst, err)
	}
	for _, i := range ifs {
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.Equal(src) {
				return Route{Iface: i.Name, Src: src}, nil
			}
		}
	}
	return Route{}, fmt.Errorf("route to %s: %w", dst, errors.New("no interface holds source address "+src.String()))
}
