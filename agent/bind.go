package agent

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"gangway/agent/wire"
)

// bindCPUs returns the CPUs a rank is bound to: with "numa", the CPUs of
// the NUMA node of the rank's first GPU (or, without GPUs, NUMA nodes dealt
// round robin by local rank), read from sysfs under the agent's SysRoot
// (Facts.SysRoot); with "core", one allowed CPU per local rank.
func (a *Agent) bindCPUs(mode string, r wire.RankSpec, f wire.Facts, allowed []int) ([]int, error) {
	switch mode {
	case "", "none":
		return nil, nil
	case "core":
		if len(allowed) == 0 {
			return nil, fmt.Errorf("no CPUs to bind to")
		}
		return []int{allowed[r.LocalRank%len(allowed)]}, nil
	case "numa":
		node := -1
		if len(r.GPUs) > 0 {
			for _, g := range f.GPUs {
				if g.Index == r.GPUs[0] {
					node = g.NUMANode
				}
			}
		}
		if node < 0 {
			node = r.LocalRank % max(f.NUMANodes, 1)
		}
		b, err := os.ReadFile(a.Facts.Path("sys", "devices", "system", "node", "node"+strconv.Itoa(node), "cpulist"))
		if err != nil {
			return nil, fmt.Errorf("rank %d: NUMA node %d: %w", r.Rank, node, err)
		}
		return parseCPUList(strings.TrimSpace(string(b)))
	}
	return nil, fmt.Errorf("unknown binding %q", mode)
}

// parseCPUList parses the kernel's "0-3,8,10-11".
func parseCPUList(s string) ([]int, error) {
	var out []int
	if s == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}

// FormatCPUList writes CPUs in the kernel's compact form.
func FormatCPUList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		k := i
		for k+1 < len(cpus) && cpus[k+1] == cpus[k]+1 {
			k++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if k > i {
			b.WriteString("-" + strconv.Itoa(cpus[k]))
		}
		i = k + 1
	}
	return b.String()
}
