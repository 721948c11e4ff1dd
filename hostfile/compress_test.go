package hostfile

import (
	"slices"
	"strings"
	"testing"
)

var compressTests = []struct {
	names []string
	want  string
}{
	{nil, ""},
	{[]string{"gpu0033"}, "gpu0033"},
	{[]string{"gpu0033", "gpu0034", "gpu0035", "gpu0101"}, "gpu[0033-0035,0101]"},
	{[]string{"gpu0101", "gpu0034", "gpu0033"}, "gpu[0033-0034,0101]"},
	// Slurm's own names, a DGX pod's: two prefixes, kept in order.
	{[]string{"dgx-b12", "dgx-a01", "dgx-a02", "dgx-b13", "dgx-a04"}, "dgx-b[12-13],dgx-a[01-02,04]"},
	{[]string{"n9", "n10", "n11", "n7"}, "n[7,9-11]"},
	// Padded and plain numbers of one prefix stay apart: each expands
	// back to its own name.
	{[]string{"n007", "n7", "n008", "n100"}, "n[007-008],n[7,100]"},
	{[]string{"node0999", "node1000"}, "node0999,node1000"},
	{[]string{"198.18.0.12", "198.18.0.13", "198.18.0.14", "198.18.1.2"}, "198.18.0.[12-14],198.18.1.2"},
	{[]string{"login", "gpu1", "login", "gpu2"}, "login,gpu[1-2],login"},
	{[]string{"n1", "n1", "n2"}, "n[1,1-2]"},
	{[]string{"n0", "n00", "n1"}, "n[0-1],n00"},
	{[]string{"h1234567890", "h1234567891"}, "h1234567890,h1234567891"},
	{[]string{"fd00::12", "fd00::13"}, "fd00::[12-13]"},
	{[]string{"7", "8"}, "[7-8]"},
}

func TestCompressNodeList(t *testing.T) {
	for _, tt := range compressTests {
		got := CompressNodeList(tt.names)
		if got != tt.want {
			t.Errorf("CompressNodeList(%q) = %q, want %q", tt.names, got, tt.want)
			continue
		}
		if len(tt.names) == 0 {
			continue
		}
		back, err := ExpandNodeList(got)
		if err != nil || !sameNames(back, tt.names) {
			t.Errorf("ExpandNodeList(%q) = %q, %v; want the names %q", got, back, err, tt.names)
		}
	}
}

// sameNames reports whether a and b hold the same names as many times.
func sameNames(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// FuzzCompressNodeList: any list of valid host names compresses to a
// node list that expands back to the same names, as many times each.
func FuzzCompressNodeList(f *testing.F) {
	for _, tt := range compressTests {
		f.Add(strings.Join(tt.names, " "))
	}
	f.Fuzz(func(t *testing.T, in string) {
		names := strings.Fields(in)
		if len(names) == 0 || len(names) > 1000 {
			return
		}
		for _, n := range names {
			if validName(n) != nil {
				return
			}
		}
		s := CompressNodeList(names)
		back, err := ExpandNodeList(s)
		if err != nil || !sameNames(back, names) {
			t.Fatalf("%q compressed to %q, which expands to %q, %v", names, s, back, err)
		}
	})
}
