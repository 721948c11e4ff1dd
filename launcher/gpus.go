package launcher

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gangway/nccl"
)

// GPUFilter holds --gpus, --include and --exclude. --gpus applies to every
// host; --include host:0,1@host2:2,3 (DeepSpeed's form) keeps only the
// listed GPUs on the named hosts; --exclude removes the listed GPUs, or
// every GPU of a host named without a list. As in DeepSpeed, they also
// choose the hosts and their slots (filterHosts, compat.go).
type GPUFilter struct {
	All     []int
	Include map[string][]int // nil list: every GPU of that host
	Exclude map[string][]int // nil list: every GPU of that host
}

func parseGPUList(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad GPU index %q", p)
		}
		out = append(out, n)
	}
	return out, nil
}

// parseHostGPUs parses "host:0,1@host2:2,3" (and "host" alone).
func parseHostGPUs(s string) (map[string][]int, error) {
	m := map[string][]int{}
	for _, part := range strings.Split(s, "@") {
		host, list, hasList := strings.Cut(part, ":")
		if host == "" {
			return nil, fmt.Errorf("bad entry %q: want host[:gpu,gpu...]", part)
		}
		if !hasList {
			m[host] = nil
			continue
		}
		g, err := parseGPUList(list)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", host, err)
		}
		m[host] = append(m[host], g...)
	}
	return m, nil
}

func (f GPUFilter) apply(host string, free []int) ([]int, error) {
	out := free
	if f.All != nil {
		out = keep(out, f.All)
		if len(out) < len(f.All) {
			return nil, fmt.Errorf("host %s: --gpus %v but the host has GPUs %v", host, f.All, free)
		}
	}
	if f.Include != nil {
		if list, ok := f.Include[host]; ok && list != nil {
			out = keep(out, list)
		}
	}
	if list, ok := f.Exclude[host]; ok {
		if list == nil {
			return nil, nil
		}
		out = slices.DeleteFunc(slices.Clone(out), func(g int) bool { return slices.Contains(list, g) })
	}
	return out, nil
}

// keep returns the members of want that are in have, in want's order.
func keep(have, want []int) []int {
	var out []int
	for _, g := range want {
		if slices.Contains(have, g) {
			out = append(out, g)
		}
	}
	return out
}

// chooseGPUs hands each host's ranks their GPUs: the --gpus/--include
// subset, and, when ranks need fewer GPUs than are free, the subset with
// the best interconnect in ring order.
func chooseGPUs(p Placement, s *session, localRanks int) ([]int, error) {
	if len(s.facts.GPUs) == 0 {
		return nil, nil
	}
	var free []int
	for _, g := range s.facts.GPUs {
		free = append(free, g.Index)
	}
	free, err := p.GPUs.apply(s.host.Name, free)
	if err != nil {
		return nil, err
	}
	need := localRanks * max(p.GPUsPer, 1)
	if need > len(free) {
		return nil, fmt.Errorf("host %s: %d ranks x %d GPUs need %d GPUs, %d are available (%v)", s.host.Name, localRanks, max(p.GPUsPer, 1), need, len(free), free)
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

// assignGPUs gives every rank its GPUs (GPUsPer of its host's chosen
// GPUs, by local rank), once: the environment (CUDA_VISIBLE_DEVICES) and
// the agent (NUMA binding) both read Rank.GPUs. Hosts without GPUs leave
// them nil.
func assignGPUs(p Placement, ranks []Rank, sessions []*session) error {
	local := make([]int, len(sessions))
	for _, r := range ranks {
		local[r.Host]++
	}
	chosen := make([][]int, len(sessions))
	for i, s := range sessions {
		g, err := chooseGPUs(p, s, local[i])
		if err != nil {
			return err
		}
		chosen[i] = g
	}
	per := max(p.GPUsPer, 1)
	for k, r := range ranks {
		if g := chosen[r.Host]; g != nil {
			ranks[k].GPUs = g[r.LocalRank*per : (r.LocalRank+1)*per]
		}
	}
	return nil
}
