package hostfile

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the parser's output")

// parseTests also seed FuzzParse. Every input is parsed as "hosts.txt".
var parseTests = []struct {
	name string
	in   string
	want []Host
	err  string
}{
	{"openmpi", "a slots=4\nb slots=2 max_slots=4\nu@c port=2222\n",
		[]Host{{Name: "a", Slots: 4}, {Name: "b", Slots: 2, MaxSlots: 4}, {Name: "c", User: "u", Slots: 1, Port: 2222}}, ""},
	{"openmpi any key order", "a port=22 max_slots=8 slots=4",
		[]Host{{Name: "a", Slots: 4, MaxSlots: 8, Port: 22}}, ""},
	{"max_slots alone", "a max_slots=2", []Host{{Name: "a", Slots: 1, MaxSlots: 2}}, ""},
	{"deepspeed", "worker-0 slots=8\nworker-1 slots=8\n",
		[]Host{{Name: "worker-0", Slots: 8}, {Name: "worker-1", Slots: 8}}, ""},
	{"mpich", "n1:4\nn2\nu@n3:2\n",
		[]Host{{Name: "n1", Slots: 4}, {Name: "n2", Slots: 1}, {Name: "n3", User: "u", Slots: 2}}, ""},
	{"pbs", "n1\nn1\nn2\nn1\n", []Host{{Name: "n1", Slots: 3}, {Name: "n2", Slots: 1}}, ""},
	{"mixed", "a slots=2\nb:3\nc\na\nb slots=1\n",
		[]Host{{Name: "a", Slots: 3}, {Name: "b", Slots: 4}, {Name: "c", Slots: 1}}, ""},
	{"comments and blanks", "# header\n\n  a slots=2 # two GPUs\n\t\nb#c\n   # x slots=9\n",
		[]Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 1}}, ""},
	{"crlf and bom", "\uFEFFa slots=2\r\nb\r\n", []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 1}}, ""},
	{"no final newline", "a slots=2", []Host{{Name: "a", Slots: 2}}, ""},
	{"ipv6", "fd00::1 slots=2\n[fd00::2]:3\nu@[fd00::3] slots=1\nfe80::1%eth0\n[fd00::1]\n",
		[]Host{{Name: "fd00::1", Slots: 3}, {Name: "fd00::2", Slots: 3}, {Name: "fd00::3", User: "u", Slots: 1}, {Name: "fe80::1%eth0", Slots: 1}}, ""},
	{"max_slots merge", "a slots=2 max_slots=4\na slots=1 max_slots=1\n", []Host{{Name: "a", Slots: 3, MaxSlots: 5}}, ""},
	{"max_slots merge unlimited", "a slots=2 max_slots=4\na\n", []Host{{Name: "a", Slots: 3}}, ""},
	{"open mpi spellings", "a cpu=4\nb count=2 max-slots=4\nc slots=1 slots_max=2\nd max-count=3\n",
		[]Host{{Name: "a", Slots: 4}, {Name: "b", Slots: 2, MaxSlots: 4}, {Name: "c", Slots: 1, MaxSlots: 2}, {Name: "d", Slots: 1, MaxSlots: 3}}, ""},
	{"range", "gpu[01-03,07] slots=8\nu@cpu[1-2]:2\n",
		[]Host{{Name: "gpu01", Slots: 8}, {Name: "gpu02", Slots: 8}, {Name: "gpu03", Slots: 8}, {Name: "gpu07", Slots: 8}, {Name: "cpu1", User: "u", Slots: 2}, {Name: "cpu2", User: "u", Slots: 2}}, ""},
	{"range merges", "n[1-2] max_slots=2\nn2\n", []Host{{Name: "n1", Slots: 1, MaxSlots: 2}, {Name: "n2", Slots: 2}}, ""},
	{"port and user keep hosts apart", "a\na port=22\nu@a\na\n",
		[]Host{{Name: "a", Slots: 2}, {Name: "a", Slots: 1, Port: 22}, {Name: "a", User: "u", Slots: 1}}, ""},

	{"bad slots", "a\nb\nc slots=x\n", nil, `hosts.txt:3: bad slots "x"`},
	{"zero slots", "a slots=0", nil, `hosts.txt:1: bad slots "0": must be 1 to 1048576`},
	{"negative slots", "a slots=-2", nil, `hosts.txt:1: bad slots "-2"`},
	{"empty slots", "a slots=", nil, `hosts.txt:1: bad slots ""`},
	{"mpich bad slots", "a:x", nil, `hosts.txt:1: bad slots "x"`},
	{"mpich empty slots", "a:", nil, `hosts.txt:1: bad slots ""`},
	{"mpich port", "a:4:22", nil, `hosts.txt:1: too many ":" fields in "a:4:22" (MPICH form is host:slots)`},
	{"not an address", "node::x", nil, `hosts.txt:1: too many ":" fields in "node::x" (MPICH form is host:slots)`},
	{"mpich with key", "a:4 slots=2", nil, `hosts.txt:1: unexpected "slots=2" after MPICH host:slots`},
	{"unknown key", "a slots=2 cores=4", nil, `hosts.txt:1: unknown key "cores"`},
	{"key typo cpus", "a cpus=4", nil, `hosts.txt:1: unknown key "cpus"`},
	{"empty key", "a =4", nil, `hosts.txt:1: unknown key ""`},
	{"key typo slot", "a slot=2", nil, `hosts.txt:1: unknown key "slot": did you mean slots=2?`},
	{"key typo maxslots", "a slots=2 maxslots=4", nil, `hosts.txt:1: unknown key "maxslots": did you mean max_slots=4?`},
	{"slots twice", "a slots=2 cpu=4", nil, `hosts.txt:1: cpu=4 repeats slots= (both give slots)`},
	{"max twice", "a max-slots=2 max_slots=4", nil, `hosts.txt:1: max_slots=4 repeats max-slots= (both give max_slots)`},
	{"bad cpu", "a cpu=x", nil, `hosts.txt:1: bad cpu "x"`},
	{"bad count", "a count=0", nil, `hosts.txt:1: bad count "0": must be 1 to 1048576`},
	{"max-slots below", "a count=4 max-slots=2", nil, `hosts.txt:1: max_slots 2 is less than slots 4`},
	{"bad range", "gpu[1-", nil, `hosts.txt:1: bad host range: node list "gpu[1-": missing "]"`},
	{"comma outside range", "a,gpu[1-2] slots=2", nil, `hosts.txt:1: bad host name "a,gpu[1-2]": contains ','`},
	{"key typo prot", "a prot=22", nil, `hosts.txt:1: unknown key "prot": did you mean port=22?`},
	{"colon key", "a slots:4", nil, `hosts.txt:1: bad field "slots:4": want key=value`},
	{"bare word", "a b", nil, `hosts.txt:1: bad field "b": want key=value`},
	{"duplicate key", "a slots=2 slots=3", nil, `hosts.txt:1: duplicate key "slots"`},
	{"max below slots", "a slots=4 max_slots=2", nil, `hosts.txt:1: max_slots 2 is less than slots 4`},
	{"zero max_slots", "x\na max_slots=0", nil, `hosts.txt:2: bad max_slots "0": must be 1 to 1048576`},
	{"bad max", "a max_slots=lots", nil, `hosts.txt:1: bad max_slots "lots"`},
	{"port zero", "a port=0", nil, `hosts.txt:1: bad port "0": must be 1 to 65535`},
	{"port high", "a port=65536", nil, `hosts.txt:1: bad port "65536": must be 1 to 65535`},
	{"port name", "a port=ssh", nil, `hosts.txt:1: bad port "ssh"`},
	{"empty user", "@a", nil, `hosts.txt:1: empty user in "@a"`},
	{"bad user", "u:x@a slots=1", nil, `hosts.txt:1: bad user "u:x": contains ':'`},
	{"comma in name", "a,b slots=2", nil, `hosts.txt:1: bad host name "a,b": contains ','`},
	{"control char", "ok\na\x01b", nil, `hosts.txt:2: bad host name "a\x01b": contains '\x01'`},
	{"second bom", "\uFEFF\uFEFFa slots=2", nil, `hosts.txt:1: bad host name "\ufeffa": contains '\ufeff'`},
	{"zero-width space", "a\u200bb", nil, `hosts.txt:1: bad host name "a\u200bb": contains '\u200b'`},
	{"option injection", "-oProxyCommand=x slots=1", nil, `hosts.txt:1: bad host name "-oProxyCommand=x": starts with "-"`},
	{"key as host", "slots=4", nil, `hosts.txt:1: bad host name "slots=4": contains '='`},
	{"bad bracket", "[node1]:2", nil, `hosts.txt:1: bad address "node1" in brackets`},
	{"slot overflow", "a slots=1048576\na\n", nil, `hosts.txt:2: host "a": more than 1048576 slots in all`},
	{"empty", "", nil, "hosts.txt: no hosts"},
	{"only comments", "# nothing\n\n   \n", nil, "hosts.txt: no hosts"},
}

func TestParse(t *testing.T) {
	for _, tt := range parseTests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse("hosts.txt", strings.NewReader(tt.in))
			if wantErr(t, err, tt.err) {
				var pe *ParseError
				if !errors.As(err, &pe) && !errors.Is(err, ErrNoHosts) {
					t.Errorf("error %T is neither *ParseError nor ErrNoHosts", err)
				}
				return
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse(%q)\n got %+v\nwant %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseErrorFields(t *testing.T) {
	_, err := Parse("hosts.txt", strings.NewReader("a\n\nb slots=x\n"))
	var pe *ParseError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v is not a *ParseError", err)
	}
	if want := (ParseError{File: "hosts.txt", Line: 3, Msg: `bad slots "x"`}); *pe != want {
		t.Errorf("ParseError = %+v, want %+v", *pe, want)
	}
	_, err = Parse("hosts.txt", strings.NewReader("# empty\n"))
	if !errors.Is(err, ErrNoHosts) || errors.As(err, &pe) {
		t.Errorf("empty file error %v: want ErrNoHosts and no *ParseError", err)
	}
}

func TestParseLongLine(t *testing.T) {
	in := "a\n" + strings.Repeat("b", maxLineLen+1) + "\n"
	_, err := Parse("hosts.txt", strings.NewReader(in))
	wantErr(t, err, "hosts.txt:2: line longer than 1048576 bytes")
}

func TestParseReadError(t *testing.T) {
	boom := errors.New("boom")
	_, err := Parse("hosts.txt", iotest.ErrReader(boom))
	if !errors.Is(err, boom) || err.Error() != "read hosts.txt: boom" {
		t.Fatalf("Parse of failing reader = %v, want read hosts.txt: boom", err)
	}
}

func TestParseFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hosts")
	if err := os.WriteFile(path, []byte("a slots=2\nb:1\nbad slots=x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ParseFile(path)
	wantErr(t, err, path+`:3: bad slots "x"`)

	if err := os.WriteFile(path, []byte("a slots=2\nb:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 1}}; !reflect.DeepEqual(got, want) {
		t.Errorf("ParseFile = %+v, want %+v", got, want)
	}

	_, err = ParseFile(filepath.Join(dir, "missing"))
	if !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "cannot open hostfile: ") {
		t.Errorf("ParseFile(missing) = %v, want a wrapped fs.ErrNotExist", err)
	}
}

// render is the golden text for a parse: one "name user port slots
// max_slots" line per host (user "-" when empty), or the error.
func render(hosts []Host, err error) string {
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	var b strings.Builder
	b.WriteString("# name user port slots max_slots\n")
	for _, h := range hosts {
		user := h.User
		if user == "" {
			user = "-"
		}
		fmt.Fprintf(&b, "%s %s %d %d %d\n", h.Name, user, h.Port, h.Slots, h.MaxSlots)
	}
	return b.String()
}

func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "*.hosts"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) == 0 {
		t.Fatal("no testdata/*.hosts files")
	}
	for _, in := range inputs {
		base := filepath.Base(in)
		t.Run(base, func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			got := render(Parse(base, strings.NewReader(string(data))))
			golden := strings.TrimSuffix(in, ".hosts") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("%s: parse differs from %s\n got:\n%s\nwant:\n%s", in, golden, got, want)
			}
		})
	}
}
