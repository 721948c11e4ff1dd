package agent

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/textx"
)

// cpuBinder binds one job's ranks on this host: the socket groups are
// read from sysfs once per job, at the first rank that needs them, not
// once per rank (a physical_package_id file per allowed CPU).
type cpuBinder struct {
	a       *Agent
	allowed []int
	sockets func() ([][]int, error)
}

// binder is the binder of a job whose ranks may use the allowed CPUs.
func (a *Agent) binder(allowed []int) *cpuBinder {
	return &cpuBinder{a: a, allowed: allowed, sockets: sync.OnceValues(func() ([][]int, error) { return a.socketCPUs(allowed) })}
}

// bind returns the CPUs rank r is bound to: with "numa", the CPUs of the
// NUMA node of the rank's first GPU (or, without GPUs, NUMA nodes dealt
// round robin by local rank), read from sysfs under the agent's SysRoot
// (Facts.SysRoot); with "core" or "hwthread", one allowed CPU per local
// rank; with "pe=N", N consecutive allowed CPUs per local rank; with
// "socket", the allowed CPUs of one socket, sockets dealt round robin by
// local rank, and with "socket:N", N consecutive local ranks per socket
// (mpirun's --map-by ppr:N:socket); with "none" or "", nil.
func (b *cpuBinder) bind(mode string, r wire.RankSpec, f wire.Facts) ([]int, error) {
	a, allowed := b.a, b.allowed
	pe, err := parseBind(mode)
	if err != nil {
		return nil, err
	}
	switch {
	case mode == "" || mode == "none":
		return nil, nil
	case mode == "core" || mode == "hwthread":
		if len(allowed) == 0 {
			return nil, fmt.Errorf("no CPUs to bind to")
		}
		return []int{allowed[r.LocalRank%len(allowed)]}, nil
	case pe > 0:
		lo, hi := r.LocalRank*pe, (r.LocalRank+1)*pe
		if hi > len(allowed) {
			return nil, fmt.Errorf("rank %d: PE=%d needs CPUs %d-%d of the allowed %s", r.Rank, pe, lo, hi-1, FormatCPUList(allowed))
		}
		return allowed[lo:hi], nil
	case mode == "socket" || strings.HasPrefix(mode, "socket:"):
		sockets, err := b.sockets()
		if err != nil {
			return nil, fmt.Errorf("rank %d: %w", r.Rank, err)
		}
		s := r.LocalRank % len(sockets)
		if per, ok := strings.CutPrefix(mode, "socket:"); ok {
			n, _ := strconv.Atoi(per) // checked by parseBind
			s = r.LocalRank / n
			if s >= len(sockets) {
				return nil, fmt.Errorf("rank %d: local rank %d at %d ranks per socket needs socket %d, and the agent may use %s", r.Rank, r.LocalRank, n, s, textx.Count(len(sockets), "socket"))
			}
		}
		return sockets[s], nil
	case mode == "numa":
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

// parseBind checks a StartJob binding: none, numa, core, hwthread,
// socket, socket:N (N ranks per socket) or pe=N (N CPUs per rank); it
// returns N for pe=N, else 0.
func parseBind(mode string) (pe int, err error) {
	switch mode {
	case "", "none", "numa", "core", "hwthread", "socket":
		return 0, nil
	}
	for _, p := range []string{"pe=", "socket:"} {
		if v, ok := strings.CutPrefix(mode, p); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1<<16 {
				return 0, fmt.Errorf("-bind-to %q: want %sN with N from 1 to %d", short(mode), p, 1<<16)
			}
			if p == "pe=" {
				return n, nil
			}
			return 0, nil
		}
	}
	return 0, fmt.Errorf("-bind-to %q: want none, numa, core, hwthread, socket, socket:N or pe=N", short(mode))
}

// socketCPUs groups the allowed CPUs by socket (sysfs
// cpu/cpuN/topology/physical_package_id under the agent's SysRoot), in
// the order of the sockets' ids. A CPU whose socket sysfs does not tell
// counts as socket 0's.
func (a *Agent) socketCPUs(allowed []int) ([][]int, error) {
	if len(allowed) == 0 {
		return nil, fmt.Errorf("no CPUs to bind to")
	}
	by := map[int][]int{}
	var ids []int
	for _, c := range allowed {
		id := 0
		b, err := os.ReadFile(a.Facts.Path("sys", "devices", "system", "cpu", "cpu"+strconv.Itoa(c), "topology", "physical_package_id"))
		if err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 {
				id = n
			}
		}
		if _, ok := by[id]; !ok {
			ids = append(ids, id)
		}
		by[id] = append(by[id], c)
	}
	slices.Sort(ids)
	out := make([][]int, len(ids))
	for i, id := range ids {
		out[i] = by[id]
	}
	return out, nil
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
