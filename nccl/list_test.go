package nccl

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

type probe struct {
	name string
	port int
	want bool
}

func TestListMatch(t *testing.T) {
	for _, tc := range []struct {
		list   string
		probes []probe
	}{
		{"", []probe{{"eth0", -1, true}, {"docker0", -1, true}, {"mlx5_0", 1, true}}},
		{"eth", []probe{{"eth0", -1, true}, {"eth1", -1, true}, {"veth0", -1, false}, {"enp1s0", -1, false}, {"et", -1, false}}},
		{"=eth0", []probe{{"eth0", -1, true}, {"eth01", -1, false}, {"eth0.1", -1, false}, {"eth", -1, false}}},
		{"^docker,lo", []probe{{"eth0", -1, true}, {"docker0", -1, false}, {"lo", -1, false}, {"lo1", -1, false}, {"ib0", -1, true}}},
		{"^=mlx5_3", []probe{{"mlx5_3", 1, false}, {"mlx5_30", 1, true}, {"mlx5_0", 1, true}}},
		{"mlx5_0:1,mlx5_1:1", []probe{
			{"mlx5_0", 1, true}, {"mlx5_0", 2, false}, {"mlx5_1", 1, true},
			{"mlx5_10", 1, true}, // prefix match: why Env uses the exact form
			{"mlx5_2", 1, false}, {"mlx5_0", -1, true},
		}},
		{"=mlx5_1:1", []probe{{"mlx5_1", 1, true}, {"mlx5_10", 1, false}, {"mlx5_1", 2, false}}},
		{"mlx5_0", []probe{{"mlx5_0", 1, true}, {"mlx5_0", 2, true}}},
		{"mlx5_0:-1", []probe{{"mlx5_0", 2, true}}},
		{"mlx5_0:1:0:1", []probe{{"mlx5_0", 1, true}, {"mlx5_0", 2, false}}},
		// "=^": the ^ is part of the name, nothing is excluded.
		{"=^eth0", []probe{{"eth0", -1, false}, {"docker0", -1, false}, {"^eth0", -1, true}}},
		// "^" alone excludes everything (NCCL: empty list matches, inverted).
		{"^", []probe{{"eth0", -1, false}}},
		{"^=", []probe{{"eth0", -1, false}}},
		{"=", []probe{{"eth0", -1, true}}},
		{"eth0,,ib,", []probe{{"eth0", -1, true}, {"ib0", -1, true}, {"en0", -1, false}}},
		{"^^x", []probe{{"^x1", -1, false}, {"x", -1, true}}},
	} {
		l, err := parseList(tc.list)
		if err != nil {
			t.Errorf("parseList(%q): %v", tc.list, err)
			continue
		}
		for _, p := range tc.probes {
			if got := l.Match(p.name, p.port); got != p.want {
				t.Errorf("%q.Match(%q, %d) = %v, want %v", tc.list, p.name, p.port, got, p.want)
			}
			if got := ncclMatch(tc.list, p.name, p.port); got != p.want {
				t.Errorf("reference %q(%q, %d) = %v, want %v", tc.list, p.name, p.port, got, p.want)
			}
		}
	}
}

func TestParseListErrors(t *testing.T) {
	long := strings.Repeat("a", 64)
	many := strings.Repeat("eth,", 16) + "ib"
	for _, tc := range []struct{ in, err string }{
		{":1", `":1" has no name before ':'`},
		{"eth0,:1", `":1" has no name`},
		{"mlx5_0:x", `"mlx5_0:x": bad port "x"`},
		{"mlx5_0:", `bad port ""`},
		{"mlx5_0:1:r", `bad rail "r"`},
		{"mlx5_0:1:0:p", `bad plane "p"`},
		{"mlx5_0:1:0:0:0", "want name[:port[:rail[:plane]]]"},
		{"mlx5_0:-2", `bad port "-2"`},
		{"mlx5_0:4294967297", `bad port "4294967297"`},
		{long, "longer than 63 bytes"},
		{many, "more than 16 entries"},
	} {
		_, err := parseList(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, errList) {
			t.Errorf("parseList(%q) err = %v, want %q", tc.in, err, tc.err)
		}
	}
	if l, err := parseList(strings.Repeat("eth,", 16)); err != nil || len(l.Entries) != 16 {
		t.Errorf("16 entries: %v, %v", l, err)
	}
	if _, err := parseList(long[:63]); err != nil {
		t.Errorf("63-byte name: %v", err)
	}
}

func TestListString(t *testing.T) {
	for in, want := range map[string]string{
		"":                  "",
		"^=mlx5_0:1,mlx5_1": "^=mlx5_0:1,mlx5_1",
		"eth,,ib:-1":        "eth,ib",
		"mlx5_0:1:2:3":      "mlx5_0:1",
		"=^eth":             "=^eth",
		",^":                ",^",
		"^,=x":              "^,=x",
		"^^x":               "^^x",
	} {
		l, err := parseList(in)
		if err != nil || l.String() != want {
			t.Errorf("parseList(%q).String() = %q, %v; want %q", in, l.String(), err, want)
		}
	}
}

// ncclMatch transliterates NCCL's handling of a list (the "^" and "="
// prefixes, parseStringList with atoi ports and MAX_IFS, matchIfList) as a
// reference for Match.
func ncclMatch(env, name string, port int) bool {
	s := env
	not := strings.HasPrefix(s, "^")
	if not {
		s = s[1:]
	}
	exact := strings.HasPrefix(s, "=")
	if exact {
		s = s[1:]
	}
	type netIf struct {
		prefix string
		port   int
	}
	var ifs []netIf
	var cur []byte
	for i := 0; len(ifs) < maxListEntries; i++ {
		c := byte(0)
		if i < len(s) {
			c = s[i]
		}
		if c == ':' {
			if len(cur) > 0 {
				ifs = append(ifs, netIf{string(cur), atoi(s[i+1:])})
				cur = nil
			}
			for i < len(s) && s[i] != ',' {
				i++
			}
			if i >= len(s) {
				break
			}
			continue
		}
		if c == ',' || c == 0 {
			if len(cur) > 0 {
				ifs = append(ifs, netIf{string(cur), -1})
				cur = nil
			}
			if c == 0 {
				break
			}
			continue
		}
		cur = append(cur, c)
	}
	match := len(ifs) == 0
	for _, f := range ifs {
		nameOK := strings.HasPrefix(name, f.prefix)
		if exact {
			nameOK = name == f.prefix
		}
		if nameOK && (port == -1 || f.port == -1 || port == f.port) {
			match = true
			break
		}
	}
	return match != not
}

// atoi is C's atoi: optional sign, leading digits, 0 when none.
func atoi(s string) int {
	i := 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, _ := strconv.Atoi(s[:i])
	return n
}

func FuzzParseList(f *testing.F) {
	for _, s := range []string{"", "eth", "=eth0", "^docker,lo", "^=mlx5_3", "mlx5_0:1,mlx5_1:1",
		"=^eth0", "^", "eth0,,ib,", "mlx5_0:1:0:1", ":1", "a:b", "mlx5_0:-1"} {
		f.Add(s, "eth0", 1)
	}
	f.Fuzz(func(t *testing.T, s, name string, port int) {
		if port < -1 || port > 1<<16 {
			port = -1
		}
		l, err := parseList(s)
		if err != nil {
			return
		}
		again, err := parseList(l.String())
		if err != nil || !reflect.DeepEqual(again, l) {
			t.Fatalf("%q -> %q -> %+v, %v; want %+v", s, l.String(), again, err, l)
		}
		names := []string{name, "eth0", "mlx5_0", ""}
		for _, e := range l.Entries {
			names = append(names, e.Name, e.Name+"0", strings.TrimSuffix(e.Name, e.Name[len(e.Name)-1:]))
		}
		for _, nm := range names {
			for _, p := range []int{port, -1, 1} {
				if got, want := l.Match(nm, p), ncclMatch(s, nm, p); got != want {
					t.Fatalf("%q.Match(%q, %d) = %v, NCCL %v", s, nm, p, got, want)
				}
			}
		}
	})
}

// String formats the list in NCCL syntax (the tests parse it again) (rail and plane are not kept).
func (l list) String() string {
	var b strings.Builder
	if l.Exclude {
		b.WriteByte('^')
	}
	if l.Exact {
		b.WriteByte('=')
	}
	// A first name that starts with a marker NCCL would read as one gets
	// an empty entry (which NCCL skips) in front.
	if len(l.Entries) > 0 && !l.Exact {
		if first := l.Entries[0].Name; first[0] == '=' || (first[0] == '^' && !l.Exclude) {
			b.WriteByte(',')
		}
	}
	for i, e := range l.Entries {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e.Name)
		if e.Port != -1 {
			b.WriteString(":" + strconv.Itoa(e.Port))
		}
	}
	return b.String()
}
