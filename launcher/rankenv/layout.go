package rankenv

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/plan"
)

// Layout is a launch's plan: the hosts to reach and the ranks on them.
// It is made once, from the command line, before any transport is built
// (the srun transport starts its agents on Hosts). Where only the hosts'
// facts tell the slots, the ranks are placed once they are in (Complete):
// the implicit local host has a slot per GPU, else per CPU, and -map-by
// ppr:N:socket N per socket. Either way one function places them (place).
type Layout struct {
	// Hosts are the hosts to reach, in plan order: once Ranks are placed,
	// those that run ranks.
	Hosts []hostfile.Host
	// Ranks is the plan, nil until placed (and for --inspect, never).
	Ranks []plan.Rank
	// Spares are the hosts that stand by, in the order they are taken:
	// those the placement left without ranks, then --spares' last N.
	Spares []hostfile.Host

	p     cli.Placement
	slots slotSource
	job   bool // place ranks (a job), or only reach the hosts (--inspect)
}

// slotSource is where a layout's slots come from.
type slotSource int

const (
	slotsGiven   slotSource = iota // -H, a hostfile or an allocation
	slotsLocal                     // the local host's facts: a slot per GPU, else per CPU
	slotsSockets                   // each host's facts: -map-by ppr:N:socket's N per socket
	slotsFacts                     // each host's facts: --nproc-per-node gpu|cpu|auto
)

// Plan lays out a job: its ranks placed at once on the given slots (the
// hosts that run none left out), or the hosts to reach first when their
// facts tell the slots. A plan that fails is a usage error.
func Plan(p cli.Placement) (Layout, error) {
	l := Reach(p)
	l.job = true
	switch {
	case p.PerSocket > 0:
		l.slots = slotsSockets
	case p.FactSlots != "":
		l.slots = slotsFacts
	}
	if l.slots != slotsGiven {
		return l, nil
	}
	hosts, reserved := l.Hosts, []hostfile.Host(nil)
	if p.Spares > 0 && p.Spares < len(hosts) {
		hosts, reserved = hosts[:len(hosts)-p.Spares], hosts[len(hosts)-p.Spares:]
	}
	placed, err := l.place(hosts, p.PlanOptions(), false)
	if errors.Is(err, plan.ErrNotEnoughSlots) && p.Source == cli.HostsSlurm {
		// A GPU job is often allocated by its GPUs (salloc -N2
		// --gpus-per-node=8): one task, so one slot, a node.
		err = fmt.Errorf("%w; the slots are the Slurm job's tasks a node: ask salloc or sbatch for --ntasks-per-node=N, or give -ppn N (--nproc-per-node N) for N ranks a host", err)
	}
	if err != nil {
		return placed, err
	}
	placed.Spares = append(unused(hosts, placed.Hosts), reserved...)
	return placed, nil
}

// unused are the hosts of all that are not in used, which place made as
// an ordered subset of all.
func unused(all, used []hostfile.Host) []hostfile.Host {
	var out []hostfile.Host
	j := 0
	for _, h := range all {
		if j < len(used) && h == used[j] {
			j++
			continue
		}
		out = append(out, h)
	}
	return out
}

// Replace is the next attempt's layout with the hosts named in out left
// out and as many spares taking their places, in order, at the end of
// the list; the ranks are placed again by the same rule, so they are
// renumbered as a fresh launch on those hosts would number them. taken
// are the spares used. It fails when fewer spares stand by than hosts
// are left out, or the ranks no longer fit.
func (l Layout) Replace(out []string) (next Layout, taken []hostfile.Host, err error) {
	gone := map[string]bool{}
	for _, name := range out {
		gone[name] = true
	}
	var keep []hostfile.Host
	for _, h := range l.Hosts {
		if !gone[h.Name] {
			keep = append(keep, h)
		}
	}
	n := len(l.Hosts) - len(keep)
	if n == 0 {
		return l, nil, nil
	}
	if n > len(l.Spares) {
		return l, nil, fmt.Errorf("%d hosts to leave out, %d spares standing by", n, len(l.Spares))
	}
	taken = slices.Clone(l.Spares[:n])
	hosts := append(keep, taken...)
	next, err = l.place(hosts, l.p.PlanOptions(), false)
	if err != nil {
		return l, nil, err
	}
	next.Spares = append(unused(hosts, next.Hosts), l.Spares[n:]...)
	return next, taken, nil
}

// Reach lays out --inspect: every host (the local host, when none are
// given), no ranks.
func Reach(p cli.Placement) Layout {
	if p.Source == cli.HostsLocal {
		return Layout{Hosts: []hostfile.Host{plan.Local(1)}, p: p, slots: slotsLocal}
	}
	return Layout{Hosts: p.Hosts, p: p}
}

// Complete is the layout once the hosts are reached, facts in Hosts'
// order: the local host's slots, and for a job whose slots come from the
// facts, the ranks placed on them. Every host then runs ranks, as
// reached. A layout placed before gets a copy of its plan (an attempt
// writes the ranks' GPUs into it).
func (l Layout) Complete(facts []wire.Facts) (Layout, error) {
	l.Hosts = slices.Clone(l.Hosts)
	switch {
	case l.slots == slotsSockets && l.job:
		for i, f := range facts {
			if f.Sockets < 1 {
				return l, cli.UsageError(fmt.Errorf("-map-by ppr:%d:socket: host %s does not report its sockets (an older agent, or no CPU topology in sysfs)", l.p.PerSocket, l.Hosts[i].Name))
			}
			l.Hosts[i].Slots = l.p.PerSocket * f.Sockets
		}
		o := l.p.PlanOptions()
		o.Oversubscribe = false
		return l.place(l.Hosts, o, true)
	case l.slots == slotsFacts && l.job:
		for i, f := range facts {
			n := factSlots(l.p.FactSlots, f)
			if n < 1 {
				return l, cli.UsageError(fmt.Errorf("--nproc-per-node gpu: host %s has no GPUs (give a number, cpu, or auto: its GPUs, else its CPUs)", l.Hosts[i].Name))
			}
			l.Hosts[i].Slots = min(n, hostfile.MaxSlotCount)
			if l.Hosts[i].MaxSlots != 0 {
				l.Hosts[i].MaxSlots = max(l.Hosts[i].MaxSlots, l.Hosts[i].Slots)
			}
		}
		return l.place(l.Hosts, l.p.PlanOptions(), true)
	case l.slots == slotsLocal:
		l.Hosts[0].Slots = localSlots(facts[0])
		if l.job {
			return l.place(l.Hosts, l.p.PlanOptions(), true)
		}
	}
	l.Ranks = slices.Clone(l.Ranks)
	return l, nil
}

// Assumed is the layout a dry run can make without facts: the local
// host a slot per CPU of this machine (cpus), one socket per host for
// -map-by ppr:N:socket; hosts that run no ranks are left out.
func (l Layout) Assumed(cpus int) (Layout, error) {
	hosts := slices.Clone(l.Hosts)
	switch {
	case l.slots == slotsSockets:
		for i := range hosts {
			hosts[i].Slots = l.p.PerSocket
		}
	case l.slots == slotsFacts:
		for i := range hosts {
			hosts[i].Slots = factSlots(l.p.FactSlots, wire.Facts{CPUs: cpus, GPUs: make([]wire.GPU, 1)})
		}
	case l.slots == slotsLocal:
		hosts[0].Slots = cpus
	default:
		return l, nil
	}
	return l.place(hosts, l.p.PlanOptions(), false)
}

// place is the one place a launch's ranks are placed: np ranks on hosts
// with o; the hosts that run none are left out, or, with all (the hosts
// were reached for the plan), an error.
func (l Layout) place(hosts []hostfile.Host, o plan.Options, all bool) (Layout, error) {
	ranks, err := plan.Ranks(hosts, l.p.NP, o)
	if err != nil {
		return l, cli.UsageError(err)
	}
	used := plan.UsedHosts(hosts, ranks)
	if all && len(used) != len(hosts) {
		by := fmt.Sprintf("-map-by ppr:%d:socket", l.p.PerSocket)
		if l.slots == slotsFacts {
			by = "--nproc-per-node " + l.p.FactSlots
		}
		return l, cli.UsageError(fmt.Errorf("%s: -np %d leaves hosts without ranks; give fewer hosts", by, len(ranks)))
	}
	l.Hosts, l.Ranks = used, ranks
	return l, nil
}

// factSlots is a host's slots for --nproc-per-node gpu, cpu or auto, as
// torchrun counts them: its GPUs, its CPUs, or its GPUs if any, else its
// CPUs; 0 for gpu on a host without GPUs.
func factSlots(kind string, f wire.Facts) int {
	switch kind {
	case "gpu":
		return len(f.GPUs)
	case "cpu":
		return max(f.CPUs, 1)
	}
	return localSlots(f)
}

// localSlots is the local host's default rank count: one per GPU, else one
// per CPU.
func localSlots(f wire.Facts) int {
	if len(f.GPUs) > 0 {
		return len(f.GPUs)
	}
	return max(f.CPUs, 1)
}
