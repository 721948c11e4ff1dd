package engine

import (
	"fmt"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// The job's PMI services that span hosts: barriers (fences) and the name
// service. Both are decided here, in the pure state.

// barrier is the PMI barrier the job is in: which hosts' agents have
// arrived, with the puts their ranks made since the last one.
type barrier struct {
	seq     int    // counts from 1, as the agents' PMI servers do
	arrived []bool // by host, kept from barrier to barrier (cleared)
	count   int    // hosts arrived
	puts    map[string]string
}

// maxNames bounds the job's name table: MPI programs publish a handful
// of names, and agents must not make the launcher grow without bound.
const maxNames = 4096

// fence merges one host's arrival at the open barrier; the last host's
// arrival releases every host with every host's puts. A host has at most
// one fence in flight, for the open barrier: its local ranks cannot enter
// the next barrier before this one is released, so an agent that sends a
// second fence before the release, or a fence for another barrier, breaks
// the protocol and is ended. So the launcher holds at most one barrier's
// puts, at most one fence's worth from each host.
func (st *state) fence(host int, f wire.Fence) []action {
	if why := st.arrive(host, f.Seq, f.Puts); why != "" {
		return st.violation(host, why)
	}
	return st.release()
}

// fences merges a relay's fence for its subtree (relay is the host it
// came from): every host it names arrives, under the same rules as
// fence, and a violation is the relay's.
func (st *state) fences(relay int, f wire.Fences) []action {
	if err := f.CheckSpans(len(st.hosts)); err != nil {
		return st.violation(relay, err.Error())
	}
	var why string
	f.Each(func(h int) bool {
		switch {
		case h < 0 || h >= len(st.hosts):
			why = fmt.Sprintf("a fence for host %d of %d", h, len(st.hosts))
		default:
			if w := st.arrive(h, f.Seq, nil); w != "" {
				why = "for " + st.hosts[h] + " " + w
			}
		}
		return why == ""
	})
	if why != "" {
		return st.violation(relay, why)
	}
	st.arrive(-1, f.Seq, f.Puts)
	return st.release()
}

// arrive marks host (-1: none, only the puts) arrived at barrier seq with
// its puts; a reason when that breaks the protocol.
func (st *state) arrive(host, seq int, puts map[string]string) string {
	b := &st.barrier
	if len(b.arrived) < len(st.hosts) {
		b.arrived = make([]bool, len(st.hosts))
	}
	switch {
	case host >= 0 && b.arrived[host]:
		return fmt.Sprintf("fence %d while its fence %d was not released", seq, b.seq)
	case seq != b.seq:
		return fmt.Sprintf("fence %d, but the next barrier is %d", seq, b.seq)
	}
	if b.puts == nil {
		b.puts = map[string]string{}
	}
	if host >= 0 {
		b.arrived[host] = true
		b.count++
	}
	for k, v := range puts {
		b.puts[k] = v
	}
	return ""
}

// release ends the open barrier once every host has arrived: every host
// is released with every host's puts.
func (st *state) release() []action {
	b := &st.barrier
	if b.count < len(st.hosts) {
		return nil
	}
	done := wire.FenceDone{Seq: b.seq, Puts: b.puts}
	clear(b.arrived)
	st.barrier = barrier{seq: b.seq + 1, arrived: b.arrived}
	return []action{actFenceDone{done}}
}

// name answers a PMI name-service request from the job's one table, so a
// name published by a rank on one host is found by ranks on every other
// (Hydra keeps one table in mpiexec too). Every request is answered at
// once: a lookup of a name nobody published is not found, never waited
// for, as Hydra answers it.
func (st *state) name(host int, n wire.Name) []action {
	if len(n.Service) > wire.MaxNameLen || len(n.Port) > wire.MaxNameLen {
		return st.violation(host, fmt.Sprintf("a name-service request of %d+%d bytes (at most %d each)", len(n.Service), len(n.Port), wire.MaxNameLen))
	}
	r := wire.NameReply{ID: n.ID, Status: wire.NameOK}
	port, exists := st.names[n.Service]
	switch n.Op {
	case wire.NamePublish:
		switch {
		case exists:
			r.Status = wire.NameExists
		case len(st.names) >= maxNames:
			r.Status = wire.NameFull
		default:
			st.names[n.Service] = n.Port
		}
	case wire.NameUnpublish:
		if !exists {
			r.Status = wire.NameNotFound
		}
		delete(st.names, n.Service)
	case wire.NameLookup:
		if !exists {
			r.Status = wire.NameNotFound
		}
		r.Port = port
	default:
		return st.violation(host, fmt.Sprintf("a name-service request with the unknown op %q", n.Op))
	}
	return []action{actNameReply{host, r}}
}
