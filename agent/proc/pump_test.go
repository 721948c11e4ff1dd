package proc

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"
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

// TestPumpTakesBufferedAfterDeadline: a pump cut by a deadline (a rank
// ended and something else holds its pipe open) still delivers what the
// pipe held, whole lines first, then the partial last line, as on a node
// too loaded for the pump to have read the rank's last lines in time.
func TestPumpTakesBufferedAfterDeadline(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close() // held open: no EOF comes
	want := strings.Repeat("a line the rank wrote before it ended\n", 1000) + "and a partial one"
	if _, err := w.WriteString(want); err != nil {
		t.Fatal(err)
	}
	if err := r.SetReadDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	var got []string
	pump(r, func(b []byte) { got = append(got, string(b)) })
	if strings.Join(got, "") != want {
		t.Fatalf("pump gave %d bytes in %d pieces, want the %d written", len(strings.Join(got, "")), len(got), len(want))
	}
	for _, g := range got[:len(got)-1] {
		if !strings.HasSuffix(g, "\n") {
			t.Errorf("a piece before the last does not end a line: %q", g[max(0, len(g)-40):])
		}
	}
	if last := got[len(got)-1]; last != "and a partial one" {
		t.Errorf("last piece %q", last)
	}
}
