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
