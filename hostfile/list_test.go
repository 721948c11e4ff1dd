package hostfile

import (
	"errors"
	"reflect"
	"testing"
)

// listTests also seed FuzzParseList.
var listTests = []struct {
	in   string
	want []Host
	err  string
}{
	{"a", []Host{{Name: "a", Slots: 1}}, ""},
	{"a:4", []Host{{Name: "a", Slots: 4}}, ""},
	{"a,a,b", []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 1}}, ""},
	{"b,a:2,b:3,a", []Host{{Name: "b", Slots: 4}, {Name: "a", Slots: 3}}, ""},
	{"hostA:8:2222", []Host{{Name: "hostA", Slots: 8, Port: 2222}}, ""},
	{"hostA::2222", []Host{{Name: "hostA", Slots: 1, Port: 2222}}, ""},
	{"root@a:2", []Host{{Name: "a", User: "root", Slots: 2}}, ""},
	{"u@a,a,u@a", []Host{{Name: "a", User: "u", Slots: 2}, {Name: "a", Slots: 1}}, ""},
	{"a::22,a,a::22", []Host{{Name: "a", Slots: 2, Port: 22}, {Name: "a", Slots: 1}}, ""},
	{"[fd00::1]:4", []Host{{Name: "fd00::1", Slots: 4}}, ""},
	{"[fd00::1]", []Host{{Name: "fd00::1", Slots: 1}}, ""},
	{"root@[fd00::1]:2:2222", []Host{{Name: "fd00::1", User: "root", Slots: 2, Port: 2222}}, ""},
	{"[10.0.0.1]:2,10.0.0.1", []Host{{Name: "10.0.0.1", Slots: 3}}, ""},
	{" a , b:2 ", []Host{{Name: "a", Slots: 1}, {Name: "b", Slots: 2}}, ""},
	{"a:007", []Host{{Name: "a", Slots: 7}}, ""},
	{"a:1048576", []Host{{Name: "a", Slots: 1048576}}, ""},
	{"node[01-03]:8", []Host{{Name: "node01", Slots: 8}, {Name: "node02", Slots: 8}, {Name: "node03", Slots: 8}}, ""},
	{"u@n[1,3]::2222,b", []Host{{Name: "n1", User: "u", Slots: 1, Port: 2222}, {Name: "n3", User: "u", Slots: 1, Port: 2222}, {Name: "b", Slots: 1}}, ""},
	{"r[1-2]n[1-2]", []Host{{Name: "r1n1", Slots: 1}, {Name: "r1n2", Slots: 1}, {Name: "r2n1", Slots: 1}, {Name: "r2n2", Slots: 1}}, ""},
	{"n[1-2],n1:2", []Host{{Name: "n1", Slots: 3}, {Name: "n2", Slots: 1}}, ""},
	{"[fd00::1]:2,n[1-2]", []Host{{Name: "fd00::1", Slots: 2}, {Name: "n1", Slots: 1}, {Name: "n2", Slots: 1}}, ""},

	{"", nil, "-H: no hosts"},
	{" ", nil, "-H: no hosts"},
	{"a,b:x", nil, `-H entry 2 "b:x": bad slots "x"`},
	{"a:0", nil, `-H entry 1 "a:0": bad slots "0": must be 1 to 1048576`},
	{"a:1048577", nil, `-H entry 1 "a:1048577": bad slots "1048577": must be 1 to 1048576`},
	{"a:99999999999999999999", nil, `-H entry 1 "a:99999999999999999999": bad slots "99999999999999999999": must be 1 to 1048576`},
	{"a:-1", nil, `-H entry 1 "a:-1": bad slots "-1"`},
	{"a:+1", nil, `-H entry 1 "a:+1": bad slots "+1"`},
	{"a:", nil, `-H entry 1 "a:": bad slots ""`},
	{"a::", nil, `-H entry 1 "a::": bad port ""`},
	{"a:1:0", nil, `-H entry 1 "a:1:0": bad port "0": must be 1 to 65535`},
	{"a:1:65536", nil, `-H entry 1 "a:1:65536": bad port "65536": must be 1 to 65535`},
	{"a:x:22", nil, `-H entry 1 "a:x:22": bad slots "x"`},
	{"a:1:2:3", nil, `-H entry 1 "a:1:2:3": too many ":" fields (want host:slots:port; put IPv6 addresses in brackets)`},
	{"fd00:1::2:3", nil, `-H entry 1 "fd00:1::2:3": too many ":" fields (want host:slots:port; put IPv6 addresses in brackets)`},
	{"a,,b", nil, `-H entry 2 "": empty entry`},
	{"a,", nil, `-H entry 2 "": empty entry`},
	{"@a", nil, `-H entry 1 "@a": empty user in "@a"`},
	{"u@", nil, `-H entry 1 "u@": empty host name`},
	{":4", nil, `-H entry 1 ":4": empty host name`},
	{"a b", nil, `-H entry 1 "a b": bad host name "a b": contains ' '`},
	{"a\x00", nil, `-H entry 1 "a\x00": bad host name "a\x00": contains '\x00'`},
	{"-oProxyCommand", nil, `-H entry 1 "-oProxyCommand": bad host name "-oProxyCommand": starts with "-"`},
	{"a@b@c", nil, `-H entry 1 "a@b@c": bad host name "b@c": contains '@'`},
	{"u:x@a", nil, `-H entry 1 "u:x@a": bad user "u:x": contains ':'`},
	{"[fd00::1", nil, `-H entry 1 "[fd00::1": missing "]" in "[fd00::1"`},
	{"[host]:2", nil, `-H entry 1 "[host]:2": bad address "host" in brackets`},
	{"[fd00::1]x", nil, `-H entry 1 "[fd00::1]x": unexpected "x" after "]"`},
	{"a:1048576,a", nil, `-H entry 2 "a": host "a": more than 1048576 slots in all`},
	{"n[1-2:4", nil, `-H entry 1 "n[1-2:4": node list "n[1-2:4": missing "]"`},
	{"n[2-1]", nil, `-H entry 1 "n[2-1]": node list "n[2-1]": bad range "2-1": start after end`},
	{"n[1-2]:x", nil, `-H entry 1 "n[1-2]:x": bad slots "x"`},
	{"n[0-16384]", nil, `-H entry 1 "n[0-16384]": too many hosts: the ranges of one -H expand to at most 16384 names (a hostfile takes more)`},
	{"n[1-10000],m[1-10000]", nil, `-H entry 2 "m[1-10000]": too many hosts: the ranges of one -H expand to at most 16384 names (a hostfile takes more)`},
	{"n[0-1048576]", nil, `-H entry 1 "n[0-1048576]": too many hosts: the ranges of one -H expand to at most 16384 names (a hostfile takes more)`},
}

func TestParseList(t *testing.T) {
	for _, tt := range listTests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseList(tt.in)
			if wantErr(t, err, tt.err) {
				var le *ListError
				if !errors.As(err, &le) && !errors.Is(err, ErrNoHosts) {
					t.Errorf("error %T is neither *ListError nor ErrNoHosts", err)
				}
				return
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseList(%q)\n got %+v\nwant %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestListErrorFields(t *testing.T) {
	_, err := ParseList("a,b:x")
	var le *ListError
	if !errors.As(err, &le) {
		t.Fatalf("error %v is not a *ListError", err)
	}
	if want := (ListError{Entry: 2, Text: "b:x", Msg: `bad slots "x"`}); *le != want {
		t.Errorf("ListError = %+v, want %+v", *le, want)
	}
	if _, err := ParseList(""); !errors.Is(err, ErrNoHosts) {
		t.Errorf(`ParseList("") = %v, want ErrNoHosts`, err)
	}
}
