package rankenv

import (
	"fmt"

	"github.com/gangway-hpc/gangway/internal/textx"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/nccl"
)

// ChooseGPUs hands a host's localRanks ranks their GPUs: the
// --gpus/--include subset, and, when ranks need fewer GPUs than are free,
// the subset with the best interconnect in ring order.
func ChooseGPUs(p cli.Placement, s Host, localRanks int) ([]int, error) {
	if len(s.Facts.GPUs) == 0 {
		return nil, nil
	}
	var free []int
	for _, g := range s.Facts.GPUs {
		free = append(free, g.Index)
	}
	free, err := p.GPUs.Apply(s.Name, free)
	if err != nil {
		return nil, err
	}
	need := localRanks * max(p.GPUsPer, 1)
	if need > len(free) {
		return nil, fmt.Errorf("host %s: %s x %s need %s, %d available (%v)", s.Name, textx.Count(localRanks, "rank"), textx.Count(max(p.GPUsPer, 1), "GPU"), textx.Count(need, "GPU"), len(free), free)
	}
	if need == len(free) && s.Facts.GPUTopo == nil {
		return free, nil
	}
	var topo [][]string
	if s.Facts.GPUTopo != nil {
		topo = s.Facts.GPUTopo.Link
	}
	got, err := nccl.ChooseGPUs(topo, free, need)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", s.Name, err)
	}
	return got, nil
}

// assignGPUs gives every rank its GPUs (GPUsPer of its host's chosen
// GPUs, by local rank), once: the environment (CUDA_VISIBLE_DEVICES) and
// the agent (NUMA binding) both read Rank.GPUs. Hosts without GPUs leave
// them nil.
func assignGPUs(p cli.Placement, ranks []plan.Rank, hosts []Host) error {
	local := make([]int, len(hosts))
	for _, r := range ranks {
		local[r.Host]++
	}
	chosen := make([][]int, len(hosts))
	for i, s := range hosts {
		g, err := ChooseGPUs(p, s, local[i])
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
