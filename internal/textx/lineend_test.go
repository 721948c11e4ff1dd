package textx

import "testing"

// FuzzLineEnd: LineEnd is the first newline, or the first carriage
// return not followed by a newline, whichever comes first.
func FuzzLineEnd(f *testing.F) {
	for _, s := range []string{"", "\r", "\n", "a\r\n", "\r99%", "a\rb\rc", "x\r", "\r\n\r\nz\r"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := -1
		for i := 0; i < len(s); i++ {
			if s[i] == '\n' || s[i] == '\r' && (i+1 == len(s) || s[i+1] != '\n') {
				want = i
				break
			}
		}
		if got := LineEnd([]byte(s)); got != want {
			t.Fatalf("LineEnd(%q) = %d, want %d", s, got, want)
		}
	})
}

// FuzzLastLineEnd: LastLineEnd is the last newline, or the last carriage
// return that something other than a newline follows, whichever is later.
func FuzzLastLineEnd(f *testing.F) {
	for _, s := range []string{"", "\r", "\n", "a\r\n", "\r99%", "a\rb\rc", "x\r", "\r\r\n\r"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := -1
		for i := len(s) - 1; i >= 0; i-- {
			if s[i] == '\n' || s[i] == '\r' && i+1 < len(s) && s[i+1] != '\n' {
				want = i
				break
			}
		}
		if got := LastLineEnd([]byte(s)); got != want {
			t.Fatalf("LastLineEnd(%q) = %d, want %d", s, got, want)
		}
	})
}
