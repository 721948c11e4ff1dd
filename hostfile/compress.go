package hostfile

import (
	"slices"
	"strconv"
	"strings"
)

// CompressNodeList writes names in Slurm's compressed host list syntax,
// which ExpandNodeList reads back: names that differ only in a trailing
// number share one bracket group of ranges ("gpu0033 gpu0034 gpu0035
// gpu0101" gives "gpu[0033-0035,0101]"), an IPv4 address's last byte
// included ("10.1.0.[7-9]"). A group's numbers are sorted; the groups
// keep the order of their first name; a name repeated is listed again,
// as a node list may repeat a name. Zero-padded numbers ("007") group
// with numbers of the same width, others ("7", "10") with each other, so
// that each expands back to the name it was. A name without a trailing
// number, or one whose number is longer than nine digits, stands alone.
// It is how a report names hundreds of hosts in one line, as Slurm's
// own messages do.
func CompressNodeList(names []string) string {
	type group struct {
		prefix string
		width  int // the digits' width when zero-padded, else 0
		nums   []int
		alone  string // a name without a number to group
	}
	type key struct {
		prefix string
		width  int
	}
	var groups []*group
	by := map[key]*group{}
	for _, n := range names {
		prefix, num, width, ok := splitTrailingNumber(n)
		if !ok {
			groups = append(groups, &group{alone: n})
			continue
		}
		k := key{prefix, width}
		g := by[k]
		if g == nil {
			g = &group{prefix: prefix, width: width}
			by[k] = g
			groups = append(groups, g)
		}
		g.nums = append(g.nums, num)
	}
	var b strings.Builder
	for i, g := range groups {
		if i > 0 {
			b.WriteByte(',')
		}
		if g.nums == nil {
			b.WriteString(g.alone)
			continue
		}
		b.WriteString(g.prefix)
		if len(g.nums) == 1 {
			b.WriteString(padded(g.nums[0], g.width))
			continue
		}
		slices.Sort(g.nums)
		b.WriteByte('[')
		for j := 0; j < len(g.nums); {
			k := j
			for k+1 < len(g.nums) && g.nums[k+1] == g.nums[k]+1 {
				k++
			}
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(padded(g.nums[j], g.width))
			if k > j {
				b.WriteByte('-')
				b.WriteString(padded(g.nums[k], g.width))
			}
			j = k + 1
		}
		b.WriteByte(']')
	}
	return b.String()
}

// splitTrailingNumber splits "gpu0033" into "gpu", 33 and its width 4
// (zero-padded), "n7" into "n", 7, 0; ok is false without trailing
// digits, or with more than nine.
func splitTrailingNumber(name string) (prefix string, num, width int, ok bool) {
	i := len(name)
	for i > 0 && name[i-1] >= '0' && name[i-1] <= '9' {
		i--
	}
	digits := name[i:]
	if digits == "" || len(digits) > 9 {
		return "", 0, 0, false
	}
	num, err := strconv.Atoi(digits)
	if err != nil {
		return "", 0, 0, false
	}
	if len(digits) > 1 && digits[0] == '0' {
		width = len(digits)
	}
	return name[:i], num, width, true
}

// padded is n in width digits, zero-padded (width 0: as it is).
func padded(n, width int) string {
	s := strconv.Itoa(n)
	if len(s) < width {
		s = strings.Repeat("0", width-len(s)) + s
	}
	return s
}
