package proc

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestPumpMaxLine: a line of exactly MaxLine bytes arrives whole with its
// newline (no extra empty line after it); one byte more is cut once.
func TestPumpMaxLine(t *testing.T) {
	for _, tt := range []struct {
		n    int
		want []int // lengths of the emitted chunks that hold the long line
	}{
		{MaxLine, []int{MaxLine + 1}},
		{MaxLine + 1, []int{MaxLine + 1, 1}},
	} {
		var chunks [][]byte
		in := io.MultiReader(strings.NewReader(strings.Repeat("x", tt.n)), strings.NewReader("\nnext\n"))
		// iotest-style small reads: the pump must not depend on big ones.
		pump(struct{ io.Reader }{in}, func(b []byte) { chunks = append(chunks, bytes.Clone(b)) })
		all := bytes.Join(chunks, nil)
		if want := strings.Repeat("x", tt.n) + "\nnext\n"; string(all) != want {
			t.Fatalf("line of %d: bytes changed (%d, want %d)", tt.n, len(all), len(want))
		}
		var got []int
		total := 0
		for _, c := range chunks {
			if total >= tt.n+1 {
				break
			}
			got = append(got, len(c))
			total += len(c)
		}
		if got[0] != tt.want[0] {
			t.Errorf("line of %d: first chunk %d bytes, want %d (chunks %v)", tt.n, got[0], tt.want[0], got)
		}
		if tt.n == MaxLine && !bytes.HasSuffix(chunks[0], []byte("x\n")) {
			t.Errorf("line of MaxLine bytes not delivered whole with its newline")
		}
	}
}
