package launcher

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// GPUFilter holds --gpus, --include and --exclude. --gpus applies to every
// host; --include host:0,1@host2:2,3 (DeepSpeed's form) keeps only the
// listed GPUs on the named hosts; --exclude removes the listed GPUs, or
// every GPU of a host named without a list. Neither changes which hosts
// run ranks: -H does that.
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

// dropCachesFlag is --drop-caches[=1|2|3]; given alone it means 3.
type dropCachesFlag struct{ v *int }

func (d dropCachesFlag) String() string {
	if d.v == nil {
		return "0"
	}
	return strconv.Itoa(*d.v)
}
func (d dropCachesFlag) IsBoolFlag() bool { return true }
func (d dropCachesFlag) Set(s string) error {
	switch s {
	case "true":
		*d.v = 3
	case "false":
		*d.v = 0
	case "1", "2", "3":
		*d.v = int(s[0] - '0')
	default:
		return fmt.Errorf("want 1, 2 or 3, got %q", s)
	}
	return nil
}
