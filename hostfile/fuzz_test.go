package hostfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// checkHosts asserts what every successful parse promises, checking names
// independently of validName.
func checkHosts(t *testing.T, hosts []Host) {
	t.Helper()
	if len(hosts) == 0 {
		t.Fatal("success with no hosts")
	}
	seen := make(map[hostKey]bool)
	for _, h := range hosts {
		if h.Slots < 1 || h.Slots > MaxSlotCount {
			t.Fatalf("host %+v: slots out of range", h)
		}
		if h.MaxSlots != 0 && h.MaxSlots < h.Slots {
			t.Fatalf("host %+v: max_slots below slots", h)
		}
		if h.Port < 0 || h.Port > 65535 {
			t.Fatalf("host %+v: bad port", h)
		}
		if h.Name == "" || strings.HasPrefix(h.Name, "-") || strings.IndexFunc(h.Name, func(r rune) bool {
			return r == ',' || r == '#' || unicode.IsSpace(r) || unicode.IsControl(r)
		}) >= 0 {
			t.Fatalf("host %+v: bad name", h)
		}
		if err := h.Validate(); err != nil {
			t.Fatalf("host %+v: %v", h, err)
		}
		k := hostKey{h.User, h.Name, h.Port}
		if seen[k] {
			t.Fatalf("host %+v appears twice", h)
		}
		seen[k] = true
	}
}

// checkRoundTrip asserts that Format then Parse gives hosts back.
func checkRoundTrip(t *testing.T, hosts []Host) {
	t.Helper()
	var buf bytes.Buffer
	if err := Format(&buf, hosts); err != nil {
		t.Fatalf("Format(%+v): %v", hosts, err)
	}
	back, err := Parse("formatted", bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("Parse(Format(hosts)) of %q: %v", buf.String(), err)
	}
	if !reflect.DeepEqual(back, hosts) {
		t.Fatalf("round trip through %q\n got %+v\nwant %+v", buf.String(), back, hosts)
	}
}

func FuzzParse(f *testing.F) {
	for _, tt := range parseTests {
		f.Add(tt.in)
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "*.hosts"))
	for _, name := range files {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(string(data))
		}
	}
	f.Fuzz(func(t *testing.T, in string) {
		hosts, err := Parse("fuzz", strings.NewReader(in))
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) && !errors.Is(err, ErrNoHosts) {
				t.Fatalf("error %T %v is neither *ParseError nor ErrNoHosts", err, err)
			}
			return
		}
		if len(hosts) > 1000 { // a large range: check a sample, quickly
			checkHosts(t, hosts[:1000])
			return
		}
		checkHosts(t, hosts)
		checkRoundTrip(t, hosts)
	})
}

func FuzzParseList(f *testing.F) {
	for _, tt := range listTests {
		f.Add(tt.in)
	}
	f.Add("gpu[1-2000]:2,u@gpu[0001-0002]::22") // past the round-trip bound
	f.Fuzz(func(t *testing.T, in string) {
		hosts, err := ParseList(in)
		if err != nil {
			var le *ListError
			if !errors.As(err, &le) && !errors.Is(err, ErrNoHosts) {
				t.Fatalf("error %T %v is neither *ListError nor ErrNoHosts", err, err)
			}
			return
		}
		if len(hosts) > 1000 { // a large range: check a sample, quickly
			checkHosts(t, hosts[:1000])
			return
		}
		checkHosts(t, hosts)
		checkRoundTrip(t, hosts)
		entries := make([]string, len(hosts))
		for i, h := range hosts {
			entries[i] = h.String()
		}
		again, err := ParseList(strings.Join(entries, ","))
		if err != nil || !reflect.DeepEqual(again, hosts) {
			t.Fatalf("ParseList of String()s %q = %+v, %v; want %+v", entries, again, err, hosts)
		}
	})
}

func FuzzExpandNodeList(f *testing.F) {
	for _, tt := range expandTests {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		names, err := ExpandNodeList(in)
		if err != nil {
			return
		}
		if len(names) == 0 || len(names) > MaxHosts {
			t.Fatalf("%d names", len(names))
		}
		if !strings.ContainsAny(in, "[]") && !reflect.DeepEqual(names, strings.Split(in, ",")) {
			t.Fatalf("plain list %q expanded to %q", in, names)
		}
		for _, n := range names {
			if err := validName(n); err != nil || strings.ContainsAny(n, "[],") {
				t.Fatalf("bad name %q (%v)", n, err)
			}
		}
		if len(names) <= 1000 { // each expanded name is a node list of itself
			again, err := ExpandNodeList(strings.Join(names, ","))
			if err != nil || !reflect.DeepEqual(again, names) {
				t.Fatalf("re-expanding %q = %q, %v", names, again, err)
			}
		}
	})
}

func FuzzParseTasksPerNode(f *testing.F) {
	for _, tt := range tasksTests {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		counts, err := ParseTasksPerNode(in)
		if err != nil {
			return
		}
		if len(counts) == 0 || len(counts) > MaxHosts {
			t.Fatalf("%d counts", len(counts))
		}
		// Re-encode run-length compressed, as Slurm does, and parse back.
		var parts []string
		for i := 0; i < len(counts); {
			j := i
			for j < len(counts) && counts[j] == counts[i] {
				j++
			}
			if counts[i] < 1 || counts[i] > MaxSlotCount {
				t.Fatalf("count %d out of range", counts[i])
			}
			p := strconv.Itoa(counts[i])
			if j-i > 1 {
				p += "(x" + strconv.Itoa(j-i) + ")"
			}
			parts = append(parts, p)
			i = j
		}
		again, err := ParseTasksPerNode(strings.Join(parts, ","))
		if err != nil || !reflect.DeepEqual(again, counts) {
			t.Fatalf("re-encoded %q parsed to %v, %v; want %v", parts, again, err, counts)
		}
	})
}
