package hostfile

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// wantErr checks err against want ("" = no error) and reports whether the
// caller should stop because an error was expected or seen.
func wantErr(t *testing.T, err error, want string) bool {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want != "" && err == nil:
		t.Fatalf("no error, want %q", want)
	case want != "" && err.Error() != want:
		t.Fatalf("error\n got %q\nwant %q", err.Error(), want)
	}
	return err != nil
}

func TestHostString(t *testing.T) {
	tests := []struct {
		h    Host
		want string
	}{
		{Host{Name: "a"}, "a"},
		{Host{Name: "a", Slots: 4}, "a:4"},
		{Host{Name: "a", User: "root", Slots: 1}, "root@a:1"},
		{Host{Name: "a", Slots: 8, Port: 2222}, "a:8:2222"},
		{Host{Name: "a", Port: 2222}, "a::2222"},
		{Host{Name: "fd00::1", Slots: 4}, "[fd00::1]:4"},
		{Host{Name: "fd00::1", User: "u"}, "u@[fd00::1]"},
		{Host{Name: "10.0.0.1", Slots: 2, MaxSlots: 4}, "10.0.0.1:2"},
	}
	for _, tt := range tests {
		if got := tt.h.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.h, got, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		h   Host
		err string
	}{
		{Host{Name: "a", Slots: 1}, ""},
		{Host{Name: "a", User: "u", Port: 65535, Slots: 2, MaxSlots: 2}, ""},
		{Host{Name: "fe80::1%eth0", Slots: 1}, ""},
		{Host{Name: "", Slots: 1}, "empty host name"},
		{Host{Name: "a b", Slots: 1}, `bad host name "a b": contains ' '`},
		{Host{Name: "a:b", Slots: 1}, `bad host name "a:b": contains ":" but is not an IP address`},
		{Host{Name: "-oProxyCommand", Slots: 1}, `bad host name "-oProxyCommand": starts with "-"`},
		{Host{Name: "a\xff", Slots: 1}, `bad host name "a\xff": invalid UTF-8`},
		{Host{Name: "a\u00a0", Slots: 1}, `bad host name "a\u00a0": contains '\u00a0'`},
		{Host{Name: strings.Repeat("a", 256), Slots: 1}, `bad host name "` + strings.Repeat("a", 256) + `": longer than 255 bytes`},
		{Host{Name: "a", User: "u:x", Slots: 1}, `bad user "u:x": contains ':'`},
		{Host{Name: "a"}, `host "a": slots 0 must be 1 to 1048576`},
		{Host{Name: "a", Slots: 4, MaxSlots: 2}, `host "a": max_slots 2 must be 4 to 1048576`},
		{Host{Name: "a", Slots: 1, Port: 65536}, `host "a": port 65536 must be 1 to 65535`},
		{Host{Name: "a", Slots: 1, Port: -1}, `host "a": port -1 must be 1 to 65535`},
	}
	for _, tt := range tests {
		t.Run(tt.h.Name, func(t *testing.T) { wantErr(t, tt.h.Validate(), tt.err) })
	}
}

func TestTotalSlots(t *testing.T) {
	hosts := []Host{{Name: "a", Slots: 8}, {Name: "b", Slots: 4}, {Name: "c", Slots: 1}}
	if got := TotalSlots(hosts); got != 13 {
		t.Errorf("TotalSlots = %d, want 13", got)
	}
	if got := TotalSlots(nil); got != 0 {
		t.Errorf("TotalSlots(nil) = %d, want 0", got)
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		name  string
		hosts []Host
		want  string
		err   string
	}{
		{"plain", []Host{{Name: "a", Slots: 1}}, "a slots=1\n", ""},
		{"order kept", []Host{
			{Name: "worker-1", Slots: 8},
			{Name: "worker-0", Slots: 8, MaxSlots: 16},
			{Name: "gpu", User: "train", Slots: 4, Port: 2222},
			{Name: "fd00::1", User: "root", Slots: 2, MaxSlots: 2, Port: 22},
		}, "worker-1 slots=8\n" +
			"worker-0 slots=8 max_slots=16\n" +
			"train@gpu slots=4 port=2222\n" +
			"root@fd00::1 slots=2 max_slots=2 port=22\n", ""},
		{"empty", nil, "", "format hostfile: no hosts"},
		{"invalid host", []Host{{Name: "a", Slots: 1}, {Name: "b c", Slots: 1}}, "",
			`format hostfile: host 2: bad host name "b c": contains ' '`},
		{"zero slots", []Host{{Name: "a"}}, "", `format hostfile: host 1: host "a": slots 0 must be 1 to 1048576`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := Format(&buf, tt.hosts)
			if wantErr(t, err, tt.err) {
				if buf.Len() != 0 {
					t.Errorf("wrote %q before failing", buf.String())
				}
				return
			}
			if buf.String() != tt.want {
				t.Errorf("Format wrote\n%s\nwant\n%s", buf.String(), tt.want)
			}
			back, err := Parse("formatted", &buf)
			if err != nil {
				t.Fatalf("Parse(Format(hosts)): %v", err)
			}
			if !reflect.DeepEqual(back, tt.hosts) {
				t.Errorf("round trip\n got %+v\nwant %+v", back, tt.hosts)
			}
		})
	}
	if err := Format(&bytes.Buffer{}, nil); !errors.Is(err, ErrNoHosts) {
		t.Errorf("Format(nil) = %v, want ErrNoHosts", err)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestFormatWriteError(t *testing.T) {
	err := Format(failWriter{}, []Host{{Name: "a", Slots: 1}})
	if err == nil || err.Error() != "disk full" {
		t.Fatalf("Format to failing writer = %v, want disk full", err)
	}
}

// TestMergerLimit: past MaxHosts hosts given in all (repeats and ranges
// included) a parse fails rather than taking unbounded time.
func TestMergerLimit(t *testing.T) {
	m := merger{added: MaxHosts - 1}
	if err := m.add(Host{Name: "a", Slots: 1}); err != nil {
		t.Fatalf("host %d: %v", MaxHosts, err)
	}
	if err := m.add(Host{Name: "a", Slots: 1}); !errors.Is(err, ErrTooManyHosts) {
		t.Fatalf("host %d: %v, want ErrTooManyHosts", MaxHosts+1, err)
	}
}

// TestMerge: the hosts of several sources in order of first appearance;
// a repeat (same name, user and port), in an earlier source or its own,
// adds its slots to the first occurrence; caps add unless one
// occurrence has none; the sums are left for Validate.
func TestMerge(t *testing.T) {
	h := func(name, user string, port, slots, max int) Host {
		return Host{Name: name, User: user, Port: port, Slots: slots, MaxSlots: max}
	}
	for _, c := range []struct {
		name    string
		sources [][]Host
		want    []Host
		err     string
	}{
		{"none", nil, nil, ""},
		{"one source", [][]Host{{h("a", "", 0, 2, 0), h("b", "", 0, 1, 0)}}, []Host{h("a", "", 0, 2, 0), h("b", "", 0, 1, 0)}, ""},
		{"repeat across", [][]Host{{h("a", "", 0, 2, 0)}, {h("b", "", 0, 1, 0), h("a", "", 0, 3, 0)}}, []Host{h("a", "", 0, 5, 0), h("b", "", 0, 1, 0)}, ""},
		{"repeat within", [][]Host{nil, {h("a", "", 0, 1, 0), h("b", "", 0, 1, 0), h("a", "", 0, 1, 0)}}, []Host{h("a", "", 0, 2, 0), h("b", "", 0, 1, 0)}, ""},
		{"user and port tell apart", [][]Host{{h("a", "", 0, 1, 0)}, {h("a", "u", 0, 1, 0), h("a", "", 2222, 1, 0)}}, []Host{h("a", "", 0, 1, 0), h("a", "u", 0, 1, 0), h("a", "", 2222, 1, 0)}, ""},
		{"caps add", [][]Host{{h("a", "", 0, 1, 2)}, {h("a", "", 0, 1, 3)}}, []Host{h("a", "", 0, 2, 5)}, ""},
		{"one uncapped lifts", [][]Host{{h("a", "", 0, 1, 2)}, {h("a", "", 0, 1, 0)}}, []Host{h("a", "", 0, 2, 0)}, ""},
		{"caps capped", [][]Host{{h("a", "", 0, 1, MaxSlotCount)}, {h("a", "", 0, 1, 5)}}, []Host{h("a", "", 0, 2, MaxSlotCount)}, ""},
		{"past the slots of one host, for Validate to refuse", [][]Host{{h("a", "", 0, MaxSlotCount, 0)}, {h("a", "", 0, 1, 0)}}, []Host{h("a", "", 0, MaxSlotCount+1, 0)}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Merge(c.sources...)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v, %v\nwant %+v", got, err, c.want)
			}
		})
	}
}
