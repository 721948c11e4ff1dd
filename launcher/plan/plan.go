package plan

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/internal/textx"
)

// Rank is one rank's place in the job.
type Rank struct {
	Rank      int
	Host      int // index into the host list
	LocalRank int // index among the ranks on its host
	LocalSize int // ranks on its host
	NodeRank  int // index of its host among the hosts that run ranks
	// GPUs are the rank's GPUs, set once the hosts' facts are known;
	// nil on hosts without GPUs and in a plan.
	GPUs []int
}

// Options are the placement options.
type Options struct {
	MapBy         string // slot (default) or node
	RankBy        string // slot or node; "" numbers ranks as MapBy deals them
	NPerNode      int
	Oversubscribe bool
}

// MaxRanks bounds -np and every plan: beyond it the launcher's per-rank
// tables alone would exhaust a jump host's memory.
const MaxRanks = 1 << 20

// ErrNotEnoughSlots is returned when -np exceeds the slots and
// --oversubscribe was not given.
var ErrNotEnoughSlots = errors.New("not enough slots")

// Ranks places np ranks on hosts. It is a pure function of its arguments.
// np == 0 means every slot (or NPerNode on every host).
//
// -map-by slot fills each host's slots before the next host (mpirun,
// horovodrun); -map-by node deals ranks round robin over the hosts. With
// --oversubscribe, ranks beyond the slots are dealt round robin over the
// hosts that are below their max_slots.
func Ranks(hosts []hostfile.Host, np int, o Options) ([]Rank, error) {
	if len(hosts) == 0 {
		return nil, errors.New("no hosts")
	}
	if np < 0 {
		return nil, fmt.Errorf("-np %d: must not be negative", np)
	}
	slots := make([]int, len(hosts))
	total := 0
	for i, h := range hosts {
		slots[i] = h.Slots
		if o.NPerNode > 0 {
			if h.Slots < o.NPerNode && !o.Oversubscribe {
				return nil, fmt.Errorf("%w: -N %d but host %s has %s (use --oversubscribe)", ErrNotEnoughSlots, o.NPerNode, h.Name, textx.Count(h.Slots, "slot"))
			}
			slots[i] = o.NPerNode
		}
		total += slots[i]
	}
	if np == 0 {
		np = total
	}
	if np <= 0 {
		return nil, fmt.Errorf("no ranks to place: %s with no slots", textx.Count(len(hosts), "host"))
	}
	if np > MaxRanks {
		return nil, fmt.Errorf("%d ranks: at most %d", np, MaxRanks)
	}
	if np > total {
		if !o.Oversubscribe || o.NPerNode > 0 {
			return nil, fmt.Errorf("%w: %s requested but only %s on %s (use --oversubscribe)", ErrNotEnoughSlots, textx.Count(np, "rank"), textx.Count(total, "slot"), textx.Count(len(hosts), "host"))
		}
	}
	assign, count, err := deal(hosts, slots, total, np, o.MapBy)
	if err != nil {
		return nil, err
	}
	if o.RankBy != "" {
		if assign, err = rankBy(count, np, o.RankBy); err != nil {
			return nil, err
		}
	}
	nodeRank := make([]int, len(hosts))
	n := 0
	for i := range hosts {
		nodeRank[i] = -1
		if count[i] > 0 {
			nodeRank[i] = n
			n++
		}
	}
	ranks := make([]Rank, np)
	local := make([]int, len(hosts))
	for r, h := range assign {
		ranks[r] = Rank{Rank: r, Host: h, LocalRank: local[h], LocalSize: count[h], NodeRank: nodeRank[h]}
		local[h]++
	}
	return ranks, nil
}

// deal assigns np ranks to hosts: assign[rank] is its host, count[host]
// its ranks. Slots are filled by slot or by node; ranks beyond the slots
// (oversubscription, checked by the caller) go round robin over the hosts
// below their max_slots.
func deal(hosts []hostfile.Host, slots []int, total, np int, mapBy string) (assign, count []int, err error) {
	count = make([]int, len(hosts))
	assign = make([]int, 0, np)
	switch mapBy {
	case "", "slot":
		for i := range hosts {
			for j := 0; j < slots[i] && len(assign) < np; j++ {
				assign = append(assign, i)
				count[i]++
			}
		}
	case "node":
		for len(assign) < np && len(assign) < total {
			for i := range hosts {
				if count[i] < slots[i] && len(assign) < np {
					assign = append(assign, i)
					count[i]++
				}
			}
		}
	default:
		return nil, nil, fmt.Errorf("-map-by %q is not supported", mapBy)
	}
	for len(assign) < np {
		placed := false
		for i, h := range hosts {
			if len(assign) < np && (h.MaxSlots == 0 || count[i] < h.MaxSlots) {
				assign = append(assign, i)
				count[i]++
				placed = true
			}
		}
		if !placed {
			return nil, nil, fmt.Errorf("%w: %d ranks exceed every host's max_slots", ErrNotEnoughSlots, np)
		}
	}
	return assign, count, nil
}

// rankBy numbers the ranks of a placement (count[host] ranks on each
// host) anew: slot gives a host's ranks consecutive numbers, node deals
// the numbers round robin over the hosts (mpirun's -rank-by).
func rankBy(count []int, np int, by string) ([]int, error) {
	assign := make([]int, 0, np)
	switch by {
	case "slot":
		for h, n := range count {
			for range n {
				assign = append(assign, h)
			}
		}
	case "node":
		left := slices.Clone(count)
		for len(assign) < np {
			for h := range left {
				if left[h] > 0 {
					assign = append(assign, h)
					left[h]--
				}
			}
		}
	default:
		return nil, fmt.Errorf("-rank-by %q is not supported (use slot or node)", by)
	}
	return assign, nil
}

// UsedHosts keeps the hosts that run ranks and renumbers the ranks' Host
// to index the result.
func UsedHosts(hosts []hostfile.Host, ranks []Rank) []hostfile.Host {
	used := make([]bool, len(hosts))
	for _, r := range ranks {
		used[r.Host] = true
	}
	idx := make([]int, len(hosts))
	var out []hostfile.Host
	for i, h := range hosts {
		if used[i] {
			idx[i] = len(out)
			out = append(out, h)
		}
	}
	for k := range ranks {
		ranks[k].Host = idx[ranks[k].Host]
	}
	return out
}

// Local is the implicit host of a job given no hosts: this machine, with
// slots ranks (its agent runs in the launcher's process).
func Local(slots int) hostfile.Host { return hostfile.Host{Name: "localhost", Slots: slots} }

// IsLocal reports whether h names this machine as Local does: served by
// the in-process agent, not reached over the network.
func IsLocal(h hostfile.Host) bool {
	return h.Port == 0 && h.User == "" && (h.Name == "localhost" || h.Name == "127.0.0.1")
}
