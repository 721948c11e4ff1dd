package wire

import (
	"errors"
	"strings"
	"testing"
)

const testKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGz7TTc8vJ2qWmXQm6q7c1vjJ0m0m4kqzQ1oHqO2Qh8V"

func TestSrunReadyRoundTrip(t *testing.T) {
	for _, r := range []SrunReady{
		{Node: "cn1", Addr: "198.18.196.2:40713", HostKey: testKey},
		{Node: "dgx-a100.rack_3", Addr: "[fd00::7]:22122", HostKey: testKey},
	} {
		line := r.String()
		if !IsSrunReady(line) {
			t.Errorf("IsSrunReady(%q) = false", line)
		}
		got, err := ParseSrunReady(line + "\r\n")
		if err != nil {
			t.Fatalf("ParseSrunReady(%q): %v", line, err)
		}
		if got != r {
			t.Errorf("ParseSrunReady(%q) = %+v, want %+v", line, got, r)
		}
	}
	want := "gangway-agent-ready v1 cn1 198.18.196.2:40713 " + testKey
	if got := (SrunReady{Node: "cn1", Addr: "198.18.196.2:40713", HostKey: testKey}).String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestParseSrunReadyRejects(t *testing.T) {
	ok := "gangway-agent-ready v1 cn1 198.18.196.2:40713 " + testKey
	for _, tt := range []struct{ line, want string }{
		{"", "1 fields"},
		{"hello world", "2 fields"},
		{strings.Replace(ok, " v1 ", " v2 ", 1), `format "v2"`},
		{strings.Replace(ok, "gangway-agent-ready", "gangway-agent-READY", 1), "starts with"},
		{strings.Replace(ok, " cn1 ", " -cn1 ", 1), `node name "-cn1"`},
		{strings.Replace(ok, " cn1 ", " c/n1 ", 1), `node name "c/n1"`},
		{strings.Replace(ok, "198.18.196.2:40713", "198.18.196.2", 1), "missing port"},
		{strings.Replace(ok, "198.18.196.2:40713", "cn1:40713", 1), "not an IP address"},
		{strings.Replace(ok, "198.18.196.2:40713", "[fe80::1%eth0]:40713", 1), "not an IP address"},
		{strings.Replace(ok, "40713", "0", 1), "port must be 1..65535"},
		{strings.Replace(ok, "40713", "65536", 1), "port must be 1..65535"},
		{strings.Replace(ok, "40713", "040713", 1), "port must be 1..65535"},
		{strings.Replace(ok, "ssh-ed25519", "SSH ED", 1), "7 fields"},
		{strings.Replace(ok, "ssh-ed25519", "ssh_ed25519", 1), `key type "ssh_ed25519"`},
		{ok[:len(ok)-1] + "!", "not base64"},
		{strings.Replace(ok, " cn1 ", "  cn1 ", 1), "7 fields"},
		{ok + " extra", "7 fields"},
	} {
		_, err := ParseSrunReady(tt.line)
		if err == nil {
			t.Errorf("ParseSrunReady(%q) succeeded, want an error containing %q", tt.line, tt.want)
			continue
		}
		if !errors.Is(err, ErrSrunReady) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseSrunReady(%q) = %v, want ErrSrunReady containing %q", tt.line, err, tt.want)
		}
	}
	if IsSrunReady("srun: error: cn1: task 0: Exited with exit code 1") {
		t.Error("an srun message is taken for a readiness line")
	}
}

// FuzzParseSrunReady: whatever it accepts prints back to the same line
// (no information is dropped or normalised away) and parses again.
func FuzzParseSrunReady(f *testing.F) {
	f.Add("gangway-agent-ready v1 cn1 198.18.196.2:40713 " + testKey)
	f.Add("gangway-agent-ready v1 n [::1]:1 a QQ==")
	f.Add("gangway-agent-ready v1 cn1 1.2.3.4:5 ssh-ed25519 ====")
	f.Fuzz(func(t *testing.T, line string) {
		r, err := ParseSrunReady(line)
		if err != nil {
			return
		}
		if got := r.String(); got != strings.TrimSpace(line) {
			t.Fatalf("%q parsed to %+v, which prints as %q", line, r, got)
		}
		if r2, err := ParseSrunReady(r.String()); err != nil || r2 != r {
			t.Fatalf("%q: reparse gave %+v, %v", line, r2, err)
		}
	})
}
