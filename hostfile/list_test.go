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
	{"gpu[01-04,07]:8", []Host{{Name: "gpu01", Slots: 8}, {Name: "gpu02", Slots: 8}, {Name: "gpu03", Slots: 8}, {Name: "gpu04", Slots: 8}, {Name: "gpu07", Slots: 8}}, ""},
	{"gpu[1-2],cpu1:2,gpu[2-3]:4", []Host{{Name: "gpu1", Slots: 1}, {Name: "gpu2", Slots: 5}, {Name: "cpu1", Slots: 2}, {Name: "gpu3", Slots: 4}}, ""},
	{"u@n[1-2]:2:2222", []Host{{Name: "n1", User: "u", Slots: 2, Port: 2222}, {Name: "n2", User: "u", Slots: 2, Port: 2222}}, ""},
	{"n[1-2]::22", []Host{{Name: "n1", Slots: 1, Port: 22}, {Name: "n2", Slots: 1, Port: 22}}, ""},
	{"r[1-2]n[1-2].dc", []Host{{Name: "r1n1.dc", Slots: 1}, {Name: "r1n2.dc", Slots: 1}, {Name: "r2n1.dc", Slots: 1}, {Name: "r2n2.dc", Slots: 1}}, ""},
	{"n[7]", []Host{{Name: "n7", Slots: 1}}, ""},

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
	{"gpu[01-04:8", nil, `-H entry 1 "gpu[01-04:8": bad host range: node list "gpu[01-04:8": missing "]"`},
	{"gpu01-04]:8", nil, `-H entry 1 "gpu01-04]:8": bad host range: node list "gpu01-04]": unmatched "]"`},
	{"gpu[04-01]", nil, `-H entry 1 "gpu[04-01]": bad host range: node list "gpu[04-01]": bad range "04-01": start after end`},
	{"gpu[a-b]", nil, `-H entry 1 "gpu[a-b]": bad host range: node list "gpu[a-b]": bad range "a-b": want numbers like 1-4 or 07`},
	{"gpu[]", nil, `-H entry 1 "gpu[]": bad host range: node list "gpu[]": empty "[]"`},
	{"[1-4]n", nil, `-H entry 1 "[1-4]n": bad address "1-4" in brackets`},
	{"-n[1-2]", nil, `-H entry 1 "-n[1-2]": bad host range: node list "-n[1-2]": bad host name "-n1": starts with "-"`},
	{"n[1-1048577]", nil, `-H entry 1 "n[1-1048577]": bad host range: node list "n[1-1048577]": range "1-1048577": too many hosts (limit 1048576)`},
	{"a:1048576,a", nil, `-H entry 2 "a": host "a": more than 1048576 slots in all`},
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
