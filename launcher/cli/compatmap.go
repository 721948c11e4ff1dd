package cli

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gangway-hpc/gangway/hostfile"
)

// compatMapping resolves -map-by's forms (ppr:N:UNIT, PE=n, a unit
// that implies a binding, modifiers), -bind-to's qualifiers and
// --cpus-per-proc into the placement (-N, PerSocket, PE, BindTo), and
// checks -rank-by.
func (c *Config) compatMapping() error {
	p := &c.Place
	m, err := parseMapBy(p.MapBy)
	if err != nil {
		return fmt.Errorf("%w: -map-by: %v", ErrUsage, err)
	}
	p.MapBy, p.PE = m.By, m.PE
	if m.Bind != "" && !c.in.given["bind-to"] {
		p.BindTo = m.Bind
	}
	if m.Oversubscribe != nil {
		p.Oversubscribe = *m.Oversubscribe
	}
	c.Out.DisplayMap = c.Out.DisplayMap || m.Display
	switch m.Unit {
	case "node":
		if c.perNodeGiven() && p.NPerNode != m.PPR {
			return fmt.Errorf("%w: -N %d and -map-by ppr:%d:node disagree", ErrUsage, p.NPerNode, m.PPR)
		}
		p.NPerNode = m.PPR
	case "socket":
		if p.NPerNode != 0 {
			return fmt.Errorf("%w: -N and -map-by ppr:N:socket: give one", ErrUsage)
		}
		p.PerSocket = m.PPR
	}
	b, err := parseBindTo(p.BindTo)
	if err != nil {
		return fmt.Errorf("%w: -bind-to %v", ErrUsage, err)
	}
	p.BindTo = b.To
	c.Out.ReportBindings = c.Out.ReportBindings || b.Report
	for _, pe := range []int{b.PE, c.in.compat.cpusPerProc} {
		switch {
		case pe == 0:
		case pe < 0 || pe > maxPE:
			return fmt.Errorf("%w: %d CPUs per rank: want 1 to %d", ErrUsage, pe, maxPE)
		case p.PE != 0 && p.PE != pe:
			return fmt.Errorf("%w: -map-by PE=%d, -bind-to core:N and --cpus-per-proc disagree on the CPUs per rank (%d)", ErrUsage, p.PE, pe)
		default:
			p.PE = pe
		}
	}
	switch p.RankBy {
	case "", "slot", "node":
	default:
		return fmt.Errorf("%w: -rank-by %q is not supported: use slot or node (ranks by core, socket or NUMA node follow from -map-by ppr:N:socket and -bind-to)", ErrUsage, p.RankBy)
	}
	return nil
}

// perNodeGiven says whether a ranks-per-host flag was given.
func (c *Config) perNodeGiven() bool {
	for _, n := range []string{"N", "npernode", "ppn", "perhost", "pernode"} {
		if c.in.given[n] {
			return true
		}
	}
	return false
}

// maxPE bounds the CPUs per rank of -map-by PE=n and its synonyms.
const maxPE = 1 << 16

// BindSpec is the agent's binding (wire.StartJob.Bind) for the placement:
// pe=N for -map-by ...:PE=N, socket:N for -map-by ppr:N:socket (unless
// -bind-to says otherwise), else -bind-to.
func (p Placement) BindSpec() string {
	switch {
	case p.PE > 0:
		return "pe=" + strconv.Itoa(p.PE)
	case p.PerSocket > 0 && (p.BindTo == "none" || p.BindTo == "socket"):
		return "socket:" + strconv.Itoa(p.PerSocket)
	}
	return p.BindTo
}

// mapBy is a parsed -map-by: slot or node, optionally with ppr:N:UNIT
// (N ranks per node or socket), PE=n (n CPUs per rank) and mpirun's
// modifiers; a unit gangway expresses as a binding sets Bind.
type mapBy struct {
	By            string // slot | node: how hosts are filled
	PPR           int    // ranks per Unit, 0 without ppr
	Unit          string // node | socket, "" without ppr
	PE            int    // CPUs per rank, 0 without PE
	Bind          string // the binding the unit implies (core, hwthread, socket), "" for none
	Oversubscribe *bool  // :OVERSUBSCRIBE or :NOOVERSUBSCRIBE, nil without
	Display       bool   // :DISPLAY
}

// numaRefusal names what gangway offers instead of mapping by NUMA node.
const numaRefusal = "NUMA nodes are not a placement unit here: -bind-to numa binds each rank to its GPU's NUMA node, -map-by ppr:N:socket places N ranks per socket"

// parseMapBy parses Open MPI's and Hydra's -map-by forms gangway
// honours: slot, node, ppr:N:node, ppr:N:socket, and core, hwthread and
// socket (a host filled in order, each rank bound to its core, hardware
// thread, or socket dealt round robin), each optionally followed by
// :PE=n (except the socket forms), :OVERSUBSCRIBE, :NOOVERSUBSCRIBE or
// :DISPLAY.
func parseMapBy(s string) (mapBy, error) {
	parts := strings.Split(s, ":")
	var m mapBy
	rest := parts[1:]
	switch strings.ToLower(parts[0]) {
	case "slot", "":
		m.By = "slot"
	case "node":
		m.By = "node"
	case "core", "hwthread", "socket", "package":
		m.By, m.Bind = "slot", strings.ToLower(parts[0])
		if m.Bind == "package" {
			m.Bind = "socket"
		}
	case "numa":
		return m, fmt.Errorf("%q is not supported: %s", s, numaRefusal)
	case "ppr":
		if len(parts) < 3 {
			return m, fmt.Errorf("%q: want ppr:N:node or ppr:N:socket", s)
		}
		n, err := strconv.Atoi(parts[1])
		if err != nil || n < 1 || n > hostfile.MaxSlotCount {
			return m, fmt.Errorf("%q: ranks per unit %q: want 1 to %d", s, parts[1], hostfile.MaxSlotCount)
		}
		m.By, m.PPR, m.Unit = "slot", n, strings.ToLower(parts[2])
		switch m.Unit {
		case "node", "socket":
		case "package":
			m.Unit = "socket"
		case "numa":
			return m, fmt.Errorf("%q is not supported: %s", s, numaRefusal)
		default:
			return m, fmt.Errorf("%q: ppr unit %q is not supported (use node or socket)", s, parts[2])
		}
		rest = parts[3:]
	default:
		return m, fmt.Errorf("%q is not supported (use slot, node, core, hwthread, socket, ppr:N:node or ppr:N:socket, optionally with :PE=n)", s)
	}
	for _, mod := range rest {
		k, v, hasVal := strings.Cut(mod, "=")
		on, off := true, false
		switch {
		case !hasVal && strings.EqualFold(k, "OVERSUBSCRIBE"):
			m.Oversubscribe = &on
			continue
		case !hasVal && strings.EqualFold(k, "NOOVERSUBSCRIBE"):
			m.Oversubscribe = &off
			continue
		case !hasVal && strings.EqualFold(k, "DISPLAY"):
			m.Display = true
			continue
		case !hasVal || !strings.EqualFold(k, "PE") || m.PE != 0:
			return m, fmt.Errorf("%q: modifier %q is not supported (use PE=n, OVERSUBSCRIBE, NOOVERSUBSCRIBE or DISPLAY)", s, mod)
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPE {
			return m, fmt.Errorf("%q: PE=%q: want CPUs per rank from 1 to %d", s, v, maxPE)
		}
		m.PE = n
	}
	if (m.Unit == "socket" || m.Bind == "socket") && m.PE > 0 {
		return m, fmt.Errorf("%q: PE with a socket mapping is not supported (use ppr:N:node:PE=n or slot:PE=n, or ppr:N:socket alone, which binds each rank to its socket)", s)
	}
	if m.PE > 0 {
		m.Bind = "" // PE=n binds; the unit only orders
	}
	return m, nil
}

// bindTo is a parsed -bind-to: gangway's binding, with Hydra's core:N
// (N cores per rank: PE) and mpirun's qualifiers.
type bindTo struct {
	To     string // none | numa | core | hwthread | socket
	PE     int    // Hydra's core:N or hwthread:N, 0 without
	Report bool   // :REPORT
}

// parseBindTo parses -bind-to none|numa|core|hwthread|socket (package is
// Open MPI 5's socket), with Hydra's :N after core or hwthread, and Open
// MPI's :overload-allowed, :if-supported, :ordered (accepted: gangway
// binds what the agent may use) and :REPORT.
func parseBindTo(s string) (bindTo, error) {
	parts := strings.Split(s, ":")
	b := bindTo{To: strings.ToLower(parts[0])}
	switch b.To {
	case "none", "numa", "core", "hwthread", "socket":
	case "package":
		b.To = "socket"
	default:
		return b, fmt.Errorf("%q is not supported (use none, numa, core, hwthread or socket; core:N binds N cores per rank)", s)
	}
	for _, q := range parts[1:] {
		if n, err := strconv.Atoi(q); err == nil && (b.To == "core" || b.To == "hwthread") && b.PE == 0 {
			b.PE = n
			continue
		}
		switch strings.ToLower(q) {
		case "overload-allowed", "if-supported", "ordered":
		case "report":
			b.Report = true
		default:
			return b, fmt.Errorf("%q: qualifier %q is not supported (core:N or hwthread:N for N CPUs per rank; overload-allowed, if-supported, ordered, REPORT)", s, q)
		}
	}
	return b, nil
}
