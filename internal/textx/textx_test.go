package textx

import (
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"slot", "slots", 1},
		{"kitten", "sitting", 3}, {"np", "pn", 2}, {"hostfile", "hostfiel", 2}, {"same", "same", 0},
	} {
		if got := Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := Distance(tc.b, tc.a); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d (symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestSuggest(t *testing.T) {
	flags := []string{"N", "n", "np", "hostfile", "H", "host", "oversubscribe", "start-timeout", "timeout", "x", "map-by", "tag-output", "port"}
	for _, tc := range []struct{ in, want string }{
		{"nq", "np"},
		{"NP", "np"},
		{"Np", "np"},
		{"hostfil", "hostfile"},
		{"hotsfile", "hostfile"},
		{"oversubscibe", "oversubscribe"},
		{"oversub", "oversubscribe"},
		{"start-timout", "start-timeout"},
		{"mapby", "map-by"},
		{"HOSTFILE", "hostfile"},
		{"tagoutput", "tag-output"},
		{"prot", "port"},
		{"zzzzzzzz", ""},
		{"", ""},
		{"completely-unrelated-option", ""},
	} {
		if got := Suggest(tc.in, flags); got != tc.want {
			t.Errorf("Suggest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	keys := []string{"slots", "max_slots", "port", "user"}
	for in, want := range map[string]string{"slot": "slots", "max-slots": "max_slots", "maxslots": "max_slots", "prot": "port", "cpus": ""} {
		if got := Suggest(in, keys); got != want {
			t.Errorf("Suggest(%q, hostfile keys) = %q, want %q", in, got, want)
		}
	}
}

var shellCases = []struct {
	in   string
	want []string
	err  string
}{
	{"ssh", []string{"ssh"}, ""},
	{"  ssh   -p 2222 ", []string{"ssh", "-p", "2222"}, ""},
	{"", nil, ""},
	{`ssh -o 'UserKnownHostsFile=/tmp/my hosts'`, []string{"ssh", "-o", "UserKnownHostsFile=/tmp/my hosts"}, ""},
	{`ssh -o "UserKnownHostsFile=/tmp/my hosts"`, []string{"ssh", "-o", "UserKnownHostsFile=/tmp/my hosts"}, ""},
	{`ssh -o UserKnownHostsFile=/tmp/my\ hosts`, []string{"ssh", "-o", "UserKnownHostsFile=/tmp/my hosts"}, ""},
	{`a"b c"d`, []string{"ab cd"}, ""},
	{`'it''s'`, []string{"its"}, ""},
	{`"a\"b" "c\\d" "e\f" "$HOME"`, []string{`a"b`, `c\d`, `e\f`, "$HOME"}, ""},
	{`'a\b'`, []string{`a\b`}, ""},
	{`'' ""`, []string{"", ""}, ""},
	{"a\\\nb", []string{"ab"}, ""},
	{"a\tb\nc", []string{"a", "b", "c"}, ""},
	{`~ *.txt`, []string{"~", "*.txt"}, ""},
	{`'unterminated`, nil, "unterminated single quote"},
	{`"unterminated`, nil, "unterminated double quote"},
	{`trailing\`, nil, "trailing backslash"},
}

func TestSplitShell(t *testing.T) {
	for _, tc := range shellCases {
		got, err := SplitShell(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("SplitShell(%q) = %q, %v; want error %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("SplitShell(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// TestSplitShellAgreesWithSh checks the table against a real POSIX shell:
// sh -c 'printf "%s\n" ...' with the same text prints the same words (for
// the cases without expansion, which SplitShell never does).
func TestSplitShellAgreesWithSh(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	for _, tc := range shellCases {
		// A newline ends a command in sh: only the words of one line compare.
		if tc.err != "" || len(tc.want) == 0 || strings.ContainsAny(tc.in, "$~*\n") {
			continue
		}
		script := `set -- ` + tc.in + `; for w; do printf '<%s>' "$w"; done`
		out, err := exec.CommandContext(t.Context(), "sh", "-c", script).Output()
		if err != nil {
			t.Fatalf("sh -c %q: %v", script, err)
		}
		var want strings.Builder
		for _, w := range tc.want {
			want.WriteString("<" + w + ">")
		}
		if string(out) != want.String() {
			t.Errorf("sh splits %q as %s, SplitShell's table says %s", tc.in, out, want.String())
		}
	}
}

func FuzzSplitShell(f *testing.F) {
	for _, tc := range shellCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		words, err := SplitShell(s)
		if err != nil {
			return
		}
		// Quoting every word in single quotes and splitting again gives
		// the same words back.
		var b strings.Builder
		for i, w := range words {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString("'" + strings.ReplaceAll(w, "'", `'\''`) + "'")
		}
		again, err := SplitShell(b.String())
		if err != nil || !reflect.DeepEqual(again, words) && !(len(again) == 0 && len(words) == 0) {
			t.Fatalf("SplitShell(%q) = %q; requoted %q splits as %q, %v", s, words, b.String(), again, err)
		}
	})
}

func FuzzSuggest(f *testing.F) {
	f.Add("slot", "slots,port")
	f.Add("", "")
	f.Add("np", "np,n")
	f.Fuzz(func(t *testing.T, s, list string) {
		cands := strings.Split(list, ",")
		got := Suggest(s, cands)
		if got == "" {
			return
		}
		for _, c := range cands {
			if c == got {
				return
			}
		}
		t.Fatalf("Suggest(%q, %q) = %q, not a candidate", s, cands, got)
	})
}

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0 hosts"}, {1, "1 host"}, {2, "2 hosts"}, {-1, "-1 hosts"}} {
		if got := Count(tc.n, "host"); got != tc.want {
			t.Errorf("Count(%d, host) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
