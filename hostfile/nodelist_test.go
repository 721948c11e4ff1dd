package hostfile

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// expandTests also seed FuzzExpandNodeList.
var expandTests = []struct {
	in   string
	want []string
	err  string
}{
	{"dgx[01-04,07],gpu-a[1-2]", []string{"dgx01", "dgx02", "dgx03", "dgx04", "dgx07", "gpu-a1", "gpu-a2"}, ""},
	{"node1", []string{"node1"}, ""},
	{"b,a,c", []string{"b", "a", "c"}, ""},
	{"n[8-11]", []string{"n8", "n9", "n10", "n11"}, ""},
	{"n[08-11]", []string{"n08", "n09", "n10", "n11"}, ""},
	{"n[098-101]", []string{"n098", "n099", "n100", "n101"}, ""},
	{"n[1-010]", []string{"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10"}, ""},
	{"n[3]", []string{"n3"}, ""},
	{"n[007]", []string{"n007"}, ""},
	{"n[5,1-2]", []string{"n5", "n1", "n2"}, ""},
	{"r[1-2]n[01-02]", []string{"r1n01", "r1n02", "r2n01", "r2n02"}, ""},
	// Slurm's hostlist.c nests the next-to-last group outermost.
	{"a[1-2]b[3-4]c[5-6]", []string{
		"a1b3c5", "a1b3c6", "a2b3c5", "a2b3c6",
		"a1b4c5", "a1b4c6", "a2b4c5", "a2b4c6",
	}, ""},
	{"node[1-2]-ib,x", []string{"node1-ib", "node2-ib", "x"}, ""},
	{"[1-2]", []string{"1", "2"}, ""},
	{"rack[1,3].n[1-2].cluster", []string{"rack1.n1.cluster", "rack1.n2.cluster", "rack3.n1.cluster", "rack3.n2.cluster"}, ""},
	{"n[18446744073709551614-18446744073709551615]", []string{"n18446744073709551614", "n18446744073709551615"}, ""},

	{"", nil, `node list "": no hosts`},
	{"n[1-", nil, `node list "n[1-": missing "]"`},
	{"n1-2]", nil, `node list "n1-2]": unmatched "]"`},
	{"n[[1]]", nil, `node list "n[[1]]": nested "["`},
	{"n[]", nil, `node list "n[]": empty "[]"`},
	{"a,,b", nil, `node list "a,,b": empty name`},
	{",a", nil, `node list ",a": empty name`},
	{"a,", nil, `node list "a,": empty name`},
	{"n[4-2]", nil, `node list "n[4-2]": bad range "4-2": start after end`},
	{"n[a-b]", nil, `node list "n[a-b]": bad range "a-b": want numbers like 1-4 or 07`},
	{"n[1,,2]", nil, `node list "n[1,,2]": bad range "": want numbers like 1-4 or 07`},
	{"n[1-2-3]", nil, `node list "n[1-2-3]": bad range "1-2-3": want numbers like 1-4 or 07`},
	{"n[-1]", nil, `node list "n[-1]": bad range "-1": want numbers like 1-4 or 07`},
	{"n[ 1]", nil, `node list "n[ 1]": bad range " 1": want numbers like 1-4 or 07`},
	{"n[99999999999999999999]", nil, `node list "n[99999999999999999999]": bad range "99999999999999999999": number too large`},
	{"n[1-999999999]", nil, `node list "n[1-999999999]": range "1-999999999": too many hosts (limit 1048576)`},
	{"n[1-524288,1-524289]", nil, `node list "n[1-524288,1-524289]": range "1-524289": too many hosts (limit 1048576)`},
	{"a[1-1024]b[1-1025]", nil, `node list "a[1-1024]b[1-1025]": "a[1-1024]b[1-1025]": too many hosts (limit 1048576)`},
	{"n[1-1048576],m", nil, `node list "n[1-1048576],m": too many hosts (limit 1048576 names, 64 MiB)`},
	{"a b[1-2]", nil, `node list "a b[1-2]": bad host name "a b1": contains ' '`},
	{"-n[1-2]", nil, `node list "-n[1-2]": bad host name "-n1": starts with "-"`},
	{strings.Repeat("a", 250) + "[1-100000]", nil,
		fmt.Sprintf(`node list "%s[1-100000]": "%[1]s[1-100000]" expands to names longer than 255 bytes`, strings.Repeat("a", 250))},
}

func TestExpandNodeList(t *testing.T) {
	for _, tt := range expandTests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ExpandNodeList(tt.in)
			if wantErr(t, err, tt.err) {
				return
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ExpandNodeList(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestExpandNodeListLimit(t *testing.T) {
	got, err := ExpandNodeList(fmt.Sprintf("n[1-%d]", MaxHosts))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != MaxHosts || got[0] != "n1" || got[MaxHosts-1] != fmt.Sprintf("n%d", MaxHosts) {
		t.Errorf("got %d names from %q to %q, want %d from n1", len(got), got[0], got[len(got)-1], MaxHosts)
	}
	for _, in := range []string{fmt.Sprintf("n[0-%d]", MaxHosts), "n[1-1048576],m", "a[1-1024]b[1-1025]"} {
		if _, err := ExpandNodeList(in); !errors.Is(err, ErrTooManyHosts) {
			t.Errorf("ExpandNodeList(%q) = %v, want ErrTooManyHosts", in, err)
		}
	}
	if _, err := ExpandNodeList(""); !errors.Is(err, ErrNoHosts) {
		t.Errorf(`ExpandNodeList("") = %v, want ErrNoHosts`, err)
	}
}

// tasksTests also seed FuzzParseTasksPerNode.
var tasksTests = []struct {
	in   string
	want []int
	err  string
}{
	{"8(x2),4", []int{8, 8, 4}, ""},
	{"1", []int{1}, ""},
	{"2(x3)", []int{2, 2, 2}, ""},
	{"4,4,1(x1)", []int{4, 4, 1}, ""},
	{"36(x2),72,36(x1)", []int{36, 36, 72, 36}, ""},

	{"", nil, `tasks per node "": empty`},
	{"8(x2", nil, `tasks per node "8(x2": bad entry "8(x2": want N or N(xM)`},
	{"8(2)", nil, `tasks per node "8(2)": bad entry "8(2)": want N or N(xM)`},
	{"x", nil, `tasks per node "x": bad count "x"`},
	{"0", nil, `tasks per node "0": bad count "0": must be 1 to 1048576`},
	{"(x2)", nil, `tasks per node "(x2)": bad count ""`},
	{"8(x0)", nil, `tasks per node "8(x0)": bad repeat "0": must be 1 to 1048576`},
	{"8(x)", nil, `tasks per node "8(x)": bad repeat ""`},
	{"8(x-1)", nil, `tasks per node "8(x-1)": bad repeat "-1"`},
	{"8,", nil, `tasks per node "8,": bad count ""`},
	{" 8", nil, `tasks per node " 8": bad count " 8"`},
	{"1(x1048577)", nil, `tasks per node "1(x1048577)": bad repeat "1048577": must be 1 to 1048576`},
	{"1(x1048576),1", nil, `tasks per node "1(x1048576),1": too many hosts (limit 1048576)`},
}

func TestParseTasksPerNode(t *testing.T) {
	for _, tt := range tasksTests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseTasksPerNode(tt.in)
			if wantErr(t, err, tt.err) {
				return
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseTasksPerNode(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
	if _, err := ParseTasksPerNode("1(x1048576),1"); !errors.Is(err, ErrTooManyHosts) {
		t.Errorf("over the limit: %v, want ErrTooManyHosts", err)
	}
}
