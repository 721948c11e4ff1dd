package plan

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// GPUFilter holds --gpus, --include and --exclude. --gpus applies to every
// host; --include host:0,1@host2:2,3 (DeepSpeed's form) keeps only the
// listed GPUs on the named hosts; --exclude removes the listed GPUs, or
// every GPU of a host named without a list. As in DeepSpeed, --include and
// --exclude also choose the hosts and their slots (the command line
// applies them to the host list).
type GPUFilter struct {
	All     []int
	Include map[string][]int // nil list: every GPU of that host
	Exclude map[string][]int // nil list: every GPU of that host
}

// ParseGPUList parses --gpus: "0,2,...".
func ParseGPUList(s string) ([]int, error) {
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

// ParseHostGPUs parses --include and --exclude: "host:0,1@host2:2,3"
// (and "host" alone).
func ParseHostGPUs(s string) (map[string][]int, error) {
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
		g, err := ParseGPUList(list)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", host, err)
		}
		m[host] = append(m[host], g...)
	}
	return m, nil
}

// Apply returns the GPUs of host, which has free, that the filter leaves;
// --gpus naming a GPU the host lacks is an error.
func (f GPUFilter) Apply(host string, free []int) ([]int, error) {
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
