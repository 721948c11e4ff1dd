package health

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// gpuCounts is each host's gpu-count check: at least o.GPUsPerHost GPUs,
// else at least the count most hosts have (a tie goes to the larger
// count: GPUs fall off the bus, they do not appear). A host whose agent
// could not count them (no nvidia-smi) is not checked.
func gpuCounts(facts []wire.Facts, o Options) []wire.Check {
	want, why := o.GPUsPerHost, "--gpus-per-host"
	if want == 0 {
		var known []int
		for _, f := range facts {
			if f.Health != nil && f.Health.GPUs >= 0 {
				known = append(known, f.Health.GPUs)
			}
		}
		var n int
		want, n = mode(known)
		why = fmt.Sprintf("as on %d of %d hosts", n, len(facts))
	}
	out := make([]wire.Check, len(facts))
	for i, f := range facts {
		c := wire.Check{Name: wire.CheckGPUCount}
		switch {
		case f.Health == nil || f.Health.GPUs < 0:
			c.Status, c.Detail = wire.CheckNotChecked, "the agent could not count its GPUs (no nvidia-smi, or it failed)"
		case f.Health.GPUs < want:
			c.Status, c.Detail = wire.CheckFail, fmt.Sprintf("%d GPUs, want %d (%s)", f.Health.GPUs, want, why)
		default:
			c.Status, c.Detail = wire.CheckOK, fmt.Sprintf("%d GPUs", f.Health.GPUs)
		}
		out[i] = c
	}
	return out
}

// mode is the most common value of vs and how many have it; a tie goes
// to the larger value; 0, 0 for none.
func mode[T int | float64](vs []T) (T, int) {
	n := map[T]int{}
	var best T
	for _, v := range vs {
		n[v]++
		if n[v] > n[best] || n[v] == n[best] && v > best {
			best = v
		}
	}
	return best, n[best]
}

// ibExpected are the RDMA ports every host should have ACTIVE: those
// ACTIVE on at least half of the hosts, with the rate most of those run
// at.
type ibExpected struct {
	hosts int
	ports []string // "mlx5_0:1", sorted
	on    map[string]int
	rate  map[string]float64
}

func portKey(h wire.HCA) string { return h.Name + ":" + strconv.Itoa(h.Port) }

func ibExpect(facts []wire.Facts) ibExpected {
	e := ibExpected{hosts: len(facts), on: map[string]int{}, rate: map[string]float64{}}
	rates := map[string][]float64{}
	for _, f := range facts {
		for _, h := range f.HCAs {
			if h.State == "ACTIVE" {
				k := portKey(h)
				e.on[k]++
				rates[k] = append(rates[k], h.RateGbps)
			}
		}
	}
	for k, n := range e.on {
		if 2*n >= len(facts) {
			e.ports = append(e.ports, k)
			e.rate[k], _ = mode(rates[k])
		}
	}
	slices.Sort(e.ports)
	return e
}

// judge is one host's ib check: each expected port is there, ACTIVE, at
// the others' rate or faster.
func (e ibExpected) judge(hcas []wire.HCA) wire.Check {
	c := wire.Check{Name: wire.CheckIB}
	if len(e.ports) == 0 {
		c.Status, c.Detail = wire.CheckOK, "no InfiniBand or RoCE port is ACTIVE on most hosts"
		return c
	}
	mine := map[string]wire.HCA{}
	for _, h := range hcas {
		mine[portKey(h)] = h
	}
	var bad []string
	for _, k := range e.ports {
		others := func() string { return fmt.Sprintf("ACTIVE on %d of %d hosts", e.on[k], e.hosts) }
		h, ok := mine[k]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%s is missing (%s)", k, others()))
		case h.State != "ACTIVE":
			bad = append(bad, fmt.Sprintf("%s is %s (%s)", k, h.State, others()))
		case h.RateGbps < e.rate[k]:
			bad = append(bad, fmt.Sprintf("%s runs at %g Gb/s, the others at %g Gb/s", k, h.RateGbps, e.rate[k]))
		}
	}
	if len(bad) > 0 {
		c.Status, c.Detail = wire.CheckFail, strings.Join(bad, "; ")
		return c
	}
	c.Status, c.Detail = wire.CheckOK, fmt.Sprintf("%d ports ACTIVE at the others' rate", len(e.ports))
	return c
}
