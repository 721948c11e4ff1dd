package plan

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// RankSet is a set of ranks given as "0,2,4-7"; the zero value is "all".
type RankSet struct {
	ranges [][2]int
}

// ParseRankSet parses "0,2,4-7".
func ParseRankSet(s string) (RankSet, error) {
	var rs RankSet
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return rs, fmt.Errorf("bad rank %q", part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return rs, fmt.Errorf("bad rank range %q", part)
			}
		}
		rs.ranges = append(rs.ranges, [2]int{a, b})
	}
	return rs, nil
}

// All reports whether the set is unrestricted.
func (s RankSet) All() bool { return len(s.ranges) == 0 }

// Has reports whether rank r is in the set.
func (s RankSet) Has(r int) bool {
	if len(s.ranges) == 0 {
		return true
	}
	for _, rg := range s.ranges {
		if r >= rg[0] && r <= rg[1] {
			return true
		}
	}
	return false
}

// Ranges writes ranks as sorted ranges, the form ParseRankSet reads:
// 0-3,5,7-9.
func Ranges(ranks []int) string {
	rs := append([]int(nil), ranks...)
	sort.Ints(rs)
	var b strings.Builder
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] <= rs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(rs[i]))
		if rs[j] != rs[i] {
			b.WriteString("-" + strconv.Itoa(rs[j]))
		}
		i = j + 1
	}
	return b.String()
}
