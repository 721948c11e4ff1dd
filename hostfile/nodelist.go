package hostfile

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// maxExpandBytes bounds the text a node list may expand to, counting every
// name at its longest; with MaxHosts it keeps "n[1-999999999]" from
// exhausting memory.
const maxExpandBytes = 64 << 20

// ExpandNodeList expands Slurm's compressed host list syntax, as found in
// SLURM_JOB_NODELIST: "dgx[01-04,07],gpu-a[1-2]" gives dgx01 dgx02 dgx03
// dgx04 dgx07 gpu-a1 gpu-a2. Commas inside brackets do not split names; a
// range keeps the zero padding of its first number. A name with several
// bracket groups expands to their cartesian product in the order Slurm's
// hostlist.c produces: the last group varies fastest, then the others from
// the first to the next-to-last ("r[1-2]n[01-02]" gives r1n01 r1n02 r2n01
// r2n02). More than MaxHosts names wraps ErrTooManyHosts.
func ExpandNodeList(s string) ([]string, error) {
	items, err := splitNodeList(s)
	if err != nil {
		return nil, fmt.Errorf("node list %q: %w", s, err)
	}
	pats := make([]nodePattern, len(items))
	total, bytes := 0, 0
	for i, item := range items {
		p, err := parseNodePattern(item)
		if err != nil {
			return nil, fmt.Errorf("node list %q: %w", s, err)
		}
		if p.count > MaxHosts-total || p.count*p.maxLen > maxExpandBytes-bytes {
			return nil, fmt.Errorf("node list %q: %w (limit %d names, %d MiB)", s, ErrTooManyHosts, MaxHosts, maxExpandBytes>>20)
		}
		total += p.count
		bytes += p.count * p.maxLen
		pats[i] = p
	}
	names := make([]string, 0, total)
	for _, p := range pats {
		start := len(names)
		names = p.expand(names)
		for _, n := range names[start:] {
			if err := validName(n); err != nil {
				return nil, fmt.Errorf("node list %q: %w", s, err)
			}
		}
	}
	return names, nil
}

// splitNodeList splits s at the commas outside brackets.
func splitNodeList(s string) ([]string, error) {
	if s == "" {
		return nil, ErrNoHosts
	}
	var items []string
	open, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			if open {
				return nil, errors.New(`nested "["`)
			}
			open = true
		case ']':
			if !open {
				return nil, errors.New(`unmatched "]"`)
			}
			open = false
		case ',':
			if !open {
				items = append(items, s[start:i])
				start = i + 1
			}
		}
	}
	if open {
		return nil, errors.New(`missing "]"`)
	}
	items = append(items, s[start:])
	for _, item := range items {
		if item == "" {
			return nil, errors.New("empty name")
		}
	}
	return items, nil
}

// nodePattern is one name of a node list: literal text around bracket
// groups, lits[0] groups[0] lits[1] ... groups[k-1] lits[k].
type nodePattern struct {
	lits   []string
	groups [][]numRange
	count  int // names it expands to
	maxLen int // longest name it expands to, in bytes
}

// numRange is lo..hi printed with at least width digits.
type numRange struct {
	lo, hi uint64
	width  int
}

func parseNodePattern(item string) (nodePattern, error) {
	p := nodePattern{count: 1}
	rest := item
	for {
		i := strings.IndexByte(rest, '[')
		if i < 0 {
			p.lits = append(p.lits, rest)
			p.maxLen += len(rest)
			break
		}
		j := strings.IndexByte(rest, ']') // after i: splitNodeList checked nesting
		p.lits = append(p.lits, rest[:i])
		p.maxLen += len(rest[:i])
		ranges, n, width, err := parseRanges(rest[i+1 : j])
		if err != nil {
			return nodePattern{}, err
		}
		if n > MaxHosts/p.count {
			return nodePattern{}, fmt.Errorf("%q: %w (limit %d)", item, ErrTooManyHosts, MaxHosts)
		}
		p.count *= n
		p.maxLen += width
		p.groups = append(p.groups, ranges)
		rest = rest[j+1:]
	}
	if p.maxLen > maxNameLen {
		return nodePattern{}, fmt.Errorf("%q expands to names longer than %d bytes", item, maxNameLen)
	}
	return p, nil
}

// parseRanges parses the inside of one bracket group, "01-04,07", returning
// the ranges, how many numbers they hold and the widest number printed.
func parseRanges(s string) (ranges []numRange, count, width int, err error) {
	if s == "" {
		return nil, 0, 0, errors.New(`empty "[]"`)
	}
	for _, part := range strings.Split(s, ",") {
		loText, hiText, isRange := strings.Cut(part, "-")
		if !isRange {
			hiText = loText
		}
		lo, err := parseDigits(loText)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("bad range %q: %w", part, err)
		}
		hi, err := parseDigits(hiText)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("bad range %q: %w", part, err)
		}
		if lo > hi {
			return nil, 0, 0, fmt.Errorf("bad range %q: start after end", part)
		}
		if hi-lo >= uint64(MaxHosts-count) {
			return nil, 0, 0, fmt.Errorf("range %q: %w (limit %d)", part, ErrTooManyHosts, MaxHosts)
		}
		count += int(hi-lo) + 1
		r := numRange{lo: lo, hi: hi, width: len(loText)}
		width = max(width, r.width, len(strconv.FormatUint(hi, 10)))
		ranges = append(ranges, r)
	}
	return ranges, count, width, nil
}

func parseDigits(s string) (uint64, error) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, errors.New("want numbers like 1-4 or 07")
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, errors.New("number too large")
	}
	return n, nil
}

// expand appends the names of p to dst. Loops nest as in Slurm's
// _push_range_list: the next-to-last group is outermost, recursion walks
// back to the first group, and the last group is innermost.
func (p nodePattern) expand(dst []string) []string {
	k := len(p.groups)
	vals := make([][]string, k)
	for g, ranges := range p.groups {
		for _, r := range ranges {
			for v := r.lo; ; v++ { // stops at hi, even hi == MaxUint64
				vals[g] = append(vals[g], zeroPad(v, r.width))
				if v == r.hi {
					break
				}
			}
		}
	}
	order := make([]int, 0, k) // outermost first
	for g := k - 2; g >= 0; g-- {
		order = append(order, g)
	}
	if k > 0 {
		order = append(order, k-1)
	}
	idx := make([]int, k)
	var b strings.Builder
	for {
		b.Reset()
		for g := range k {
			b.WriteString(p.lits[g])
			b.WriteString(vals[g][idx[g]])
		}
		b.WriteString(p.lits[k])
		dst = append(dst, b.String())
		j := k - 1
		for ; j >= 0; j-- {
			g := order[j]
			if idx[g]++; idx[g] < len(vals[g]) {
				break
			}
			idx[g] = 0
		}
		if j < 0 {
			return dst
		}
	}
}

func zeroPad(v uint64, width int) string {
	s := strconv.FormatUint(v, 10)
	if len(s) >= width {
		return s
	}
	return strings.Repeat("0", width-len(s)) + s
}

// ParseTasksPerNode expands Slurm's per-node count syntax, used by
// SLURM_TASKS_PER_NODE and SLURM_JOB_CPUS_PER_NODE: "8(x2),4" gives
// [8 8 4]. Every count must be 1..MaxSlotCount; more than MaxHosts counts in
// all wraps ErrTooManyHosts.
func ParseTasksPerNode(s string) ([]int, error) {
	if s == "" {
		return nil, errors.New(`tasks per node "": empty`)
	}
	var counts []int
	for _, item := range strings.Split(s, ",") {
		countText, repText := item, "1"
		if i := strings.IndexByte(item, '('); i >= 0 {
			if !strings.HasPrefix(item[i:], "(x") || !strings.HasSuffix(item, ")") {
				return nil, fmt.Errorf("tasks per node %q: bad entry %q: want N or N(xM)", s, item)
			}
			countText, repText = item[:i], item[i+2:len(item)-1]
		}
		n, err := parseNum("count", countText, 1, MaxSlotCount)
		if err != nil {
			return nil, fmt.Errorf("tasks per node %q: %w", s, err)
		}
		rep, err := parseNum("repeat", repText, 1, MaxHosts)
		if err != nil {
			return nil, fmt.Errorf("tasks per node %q: %w", s, err)
		}
		if rep > MaxHosts-len(counts) {
			return nil, fmt.Errorf("tasks per node %q: %w (limit %d)", s, ErrTooManyHosts, MaxHosts)
		}
		for range rep {
			counts = append(counts, n)
		}
	}
	return counts, nil
}
