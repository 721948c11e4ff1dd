package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"gangway/agent/wire"
	"gangway/nccl"
)

// hostNet converts one session's facts for the nccl decisions.
func hostNet(s *session, peers []string) nccl.HostNet {
	h := nccl.HostNet{Host: s.host.Name, Peers: peers}
	for _, n := range s.facts.NICs {
		h.NICs = append(h.NICs, nccl.NIC{Name: n.Name, Index: n.Index, Type: n.Type, Up: n.Up, SpeedMbps: n.SpeedMbps, Addrs: n.Addrs})
	}
	for _, r := range s.facts.Routes {
		h.Routes = append(h.Routes, nccl.Route{Peer: r.Peer, Addr: r.Addr, Iface: r.Iface, Err: r.Err})
	}
	for _, c := range s.facts.HCAs {
		h.HCAs = append(h.HCAs, nccl.HCA{Name: c.Name, Port: c.Port, State: c.State, LinkLayer: c.LinkLayer})
	}
	return h
}

// chooseNetworks picks every host's data interface. Single-host jobs keep
// NCCL's and Gloo's own defaults (all their traffic is local) unless
// --network-interface forces one. The result is indexed like sessions;
// a nil entry means "set nothing".
func chooseNetworks(cfg Config, sessions []*session) ([]*nccl.Choice, error) {
	out := make([]*nccl.Choice, len(sessions))
	var force []string
	if cfg.NetworkInterface != "" {
		force = strings.Split(cfg.NetworkInterface, ",")
	}
	if len(sessions) == 1 && force == nil {
		return out, nil
	}
	names := make([]string, len(sessions))
	for i, s := range sessions {
		names[i] = s.host.Name
	}
	var errs []error
	for i, s := range sessions {
		c, err := nccl.ChooseInterface(hostNet(s, routePeers(names, i)), force...)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[i] = &c
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("network interface choice: %w", errors.Join(errs...))
	}
	return out, nil
}

// maxRoutePeers bounds how many peers each agent looks up routes to, so
// that facts, their transfer and the interface choice stay O(hosts) in
// total rather than O(hosts^2).
const maxRoutePeers = 16

// routePeers are the peers host i is asked to route to: every other host
// in small jobs; beyond that rank 0's host, its ring neighbours (the
// peers NCCL's rings and the preflight use) and hosts spread evenly over
// the rest. It is a pure function, so the agent's Hello and the interface
// choice agree on the list.
func routePeers(names []string, i int) []string {
	n := len(names)
	if n-1 <= maxRoutePeers {
		return without(names, i)
	}
	seen := map[int]bool{i: true}
	var out []string
	add := func(k int) {
		k = ((k % n) + n) % n
		if !seen[k] && len(out) < maxRoutePeers {
			seen[k] = true
			out = append(out, names[k])
		}
	}
	add(0)
	add(i + 1)
	add(i - 1)
	for step := 1; step < maxRoutePeers; step++ {
		add(i + step*n/(maxRoutePeers-2))
	}
	for d := 2; len(out) < maxRoutePeers && d < n; d++ {
		add(i + d)
		add(i - d)
	}
	return out
}

// masterAddr is the address of rank 0's host that the others should use:
// the address the launcher reached it on when that address is on the
// chosen data interface, else the data interface's address.
func masterAddr(s *session, c *nccl.Choice) string {
	reached := net.ParseIP(s.addr)
	if c == nil || len(c.Ifaces) == 0 {
		if reached != nil {
			return s.addr
		}
		return s.host.Name
	}
	if reached != nil {
		for _, n := range s.facts.NICs {
			if n.Name != c.Ifaces[0] {
				continue
			}
			for _, a := range n.Addrs {
				if _, ipn, err := net.ParseCIDR(a); err == nil && ipn.Contains(reached) {
					return s.addr
				}
			}
		}
	}
	if c.Addr != "" {
		return c.Addr
	}
	return s.addr
}

// label names a host as the launcher knows it, with the agent's own name
// when that differs: "198.18.0.2 (h1)".
func label(s *session) string {
	if n := s.facts.Name; n != "" && n != s.host.Name {
		return s.host.Name + " (" + n + ")"
	}
	return s.host.Name
}

// agentPort is the port the host's agent (or sshd, for --transport ssh)
// listens on, which the preflight dials.
func agentPort(cfg Config, s *session) int {
	if s.host.Port != 0 {
		return s.host.Port
	}
	if cfg.Transport == "ssh" {
		return 22
	}
	return cfg.Port
}

// ErrPreflight is returned when hosts cannot reach each other.
var ErrPreflight = errors.New("preflight failed")

// preflight has every host open a TCP connection to every other host's
// agent on its chosen address (all pairs up to 32 hosts, a ring beyond or
// with --transport ssh),
// so a broken link fails the job before any rank starts.
func (j *job) preflight(ctx context.Context, w io.Writer, choices []*nccl.Choice) error {
	n := len(j.sessions)
	if n < 2 || !j.cfg.Preflight {
		return nil
	}
	target := make([]string, n)
	for i, s := range j.sessions {
		// The host's address on its data interface, chosen as for
		// MASTER_ADDR: the address the launcher reached it on when that
		// lies on the interface (an agent may listen on that address
		// only, as loopback agents on 127.0.0.2 do), else the interface's.
		target[i] = net.JoinHostPort(masterAddr(s, choices[i]), strconv.Itoa(agentPort(j.cfg, s)))
	}
	probes := make([][]int, n) // host -> peers it dials
	// With --transport ssh every probe makes the peer's sshd fork a
	// session process, so the check is a ring there; agents are cheap to
	// dial, so small jobs check every pair.
	allPairs := n <= 32 && j.cfg.Transport != "ssh"
	for i := range n {
		if allPairs {
			for k := range n {
				if k != i {
					probes[i] = append(probes[i], k)
				}
			}
		} else {
			probes[i] = []int{(i + 1) % n}
		}
	}
	for i, s := range j.sessions {
		p := wire.Probe{Timeout: 5 * time.Second}
		for _, k := range probes[i] {
			p.Targets = append(p.Targets, target[k])
		}
		if err := s.conn.Send(wire.KindProbe, p); err != nil {
			return &HostError{Host: s.host.Name, Err: err}
		}
	}
	res, err := j.collect(ctx, wire.KindProbeResult, 30*time.Second)
	if err != nil {
		return err
	}
	var bad []string
	for i, s := range j.sessions {
		var pr wire.ProbeResult
		if err := res[i].Decode(&pr); err != nil {
			return &HostError{Host: s.host.Name, Err: err}
		}
		via := ""
		if c := choices[i]; c != nil && len(c.Ifaces) > 0 {
			via = " via " + strings.Join(c.Ifaces, ",")
		}
		for k, r := range pr.Results {
			if r.Err != "" && k < len(probes[i]) {
				peer := label(j.sessions[probes[i][k]])
				bad = append(bad, fmt.Sprintf("  %s -> %s (%s%s): %s", label(s), peer, r.Target, via, r.Err))
			}
		}
	}
	if len(bad) > 0 {
		fmt.Fprintf(w, "launcher: preflight: %d of the host pairs cannot connect:\n%s\n", len(bad), strings.Join(bad, "\n"))
		return fmt.Errorf("%w: hosts cannot reach each other on their chosen interfaces (--preflight=false skips this check)", ErrPreflight)
	}
	return nil
}

// dropCaches asks every host to sync and drop its page caches, in
// parallel, and reports the time each took.
func (j *job) dropCaches(ctx context.Context, w io.Writer) error {
	if j.cfg.DropCaches == 0 {
		return nil
	}
	j.broadcast(wire.KindPrepare, wire.Prepare{DropCaches: j.cfg.DropCaches})
	res, err := j.collect(ctx, wire.KindPrepared, 5*time.Minute)
	if err != nil {
		return err
	}
	var errs []error
	for i, s := range j.sessions {
		var p wire.Prepared
		if err := res[i].Decode(&p); err != nil {
			return err
		}
		if p.Err != "" {
			if j.cfg.DropCachesBestEffort {
				fmt.Fprintf(w, "launcher: drop caches on %s failed (best effort): %s\n", s.host.Name, p.Err)
				continue
			}
			errs = append(errs, &HostError{Host: s.host.Name, Err: errors.New(p.Err)})
			continue
		}
		fmt.Fprintf(w, "launcher: dropped page caches on %s in %v\n", s.host.Name, p.Took.Round(time.Millisecond))
	}
	if len(errs) > 0 {
		return fmt.Errorf("--drop-caches (use --drop-caches-best-effort to go on): %w", errors.Join(errs...))
	}
	return nil
}

// collect waits for one message of kind from every host.
func (j *job) collect(ctx context.Context, kind wire.Kind, timeout time.Duration) ([]wire.Msg, error) {
	out := make([]wire.Msg, len(j.sessions))
	got := 0
	t := time.NewTimer(timeout)
	defer t.Stop()
	for got < len(j.sessions) {
		select {
		case ev := <-j.events:
			name := j.sessions[ev.host].host.Name
			if ev.err != nil {
				return nil, &HostError{Host: name, Err: fmt.Errorf("connection lost: %w", ev.err)}
			}
			switch ev.msg.Kind {
			case kind:
				if out[ev.host].Kind == 0 {
					got++
				}
				out[ev.host] = ev.msg
			case wire.KindError:
				var e wire.Error
				_ = ev.msg.Decode(&e)
				return nil, &HostError{Host: name, Err: errors.New(e.Msg)}
			}
		case <-t.C:
			var missing []string
			for i, s := range j.sessions {
				if out[i].Kind == 0 {
					missing = append(missing, s.host.Name)
				}
			}
			sort.Strings(missing)
			return nil, fmt.Errorf("no %s answer within %v from %s", kind, timeout, strings.Join(missing, ", "))
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, nil
}

// chooseGPUs hands each host's ranks their GPUs: the --gpus/--include
// subset, and, when ranks need fewer GPUs than are free, the subset with
// the best interconnect in ring order.
func chooseGPUs(cfg Config, s *session, localRanks int) ([]int, error) {
	if len(s.facts.GPUs) == 0 {
		return nil, nil
	}
	var free []int
	for _, g := range s.facts.GPUs {
		free = append(free, g.Index)
	}
	free, err := cfg.GPUFilter.apply(s.host.Name, free)
	if err != nil {
		return nil, err
	}
	need := localRanks * max(cfg.GPUsPer, 1)
	if need > len(free) {
		return nil, fmt.Errorf("host %s: %d ranks x %d GPUs need %d GPUs, %d are available (%v)", s.host.Name, localRanks, max(cfg.GPUsPer, 1), need, len(free), free)
	}
	if need == len(free) && s.facts.GPUTopo == nil {
		return free, nil
	}
	var topo [][]string
	if s.facts.GPUTopo != nil {
		topo = s.facts.GPUTopo.Link
	}
	got, err := nccl.ChooseGPUs(topo, free, need)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", s.host.Name, err)
	}
	return got, nil
}
