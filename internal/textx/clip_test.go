package textx

import (
	"strings"
	"testing"
)

func TestClip(t *testing.T) {
	if got := Clip("short"); got != "short" {
		t.Errorf("Clip(short) = %q", got)
	}
	long := strings.Repeat("é", 100) // 200 bytes
	got := Clip(long)
	if !strings.HasSuffix(got, "...(200 bytes)") || len(got) > 64+len("...(200 bytes)") {
		t.Errorf("Clip(200 bytes) = %q", got)
	}
	if s := strings.TrimSuffix(got, "...(200 bytes)"); strings.ToValidUTF8(s, "?") != s {
		t.Errorf("clip cut a character: %q", got)
	}
}

func TestClipMore(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"short", 8, "short"},
		{"exactly8", 8, "exactly8"},
		{"ninebytes", 8, "ninebyte... (1 more bytes)"},
		{"", 0, ""},
	} {
		if got := ClipMore(tc.in, tc.max); got != tc.want {
			t.Errorf("ClipMore(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
		if got := ClipMore([]byte(tc.in), tc.max); got != tc.want {
			t.Errorf("ClipMore([]byte(%q), %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}
