package proc

import (
	"bytes"
	"io"
	"os"
	"slices"
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

// TestEmitBounded: whole lines go in pieces of at most MaxLine+1 bytes, a
// longer line is cut as the pump cuts it, and the partial line is left.
func TestEmitBounded(t *testing.T) {
	L := func(n int) string { return strings.Repeat("L", n) }
	for _, tt := range []struct {
		name, in string
		want     []int // lengths of the pieces emitted
		rest     string
	}{
		{"lines and a partial one", "a\nb\nc", []int{4}, "c"},
		{"a line one byte over, its newline, a partial", L(MaxLine+1) + "\nend", []int{MaxLine + 1, 1}, "end"},
		{"a line of MaxLine with its newline, then another", L(MaxLine) + "\nx\n", []int{MaxLine + 1, 2}, ""},
		{"two pieces and a byte of one line", L(2*MaxLine + 3), []int{MaxLine + 1, MaxLine + 1}, "L"},
		{"nothing whole", "abc", nil, "abc"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []int
			var all []byte
			rest := emitBounded([]byte(tt.in), func(b []byte) {
				got = append(got, len(b))
				all = append(all, b...)
			})
			if !slices.Equal(got, tt.want) || string(rest) != tt.rest || string(all)+string(rest) != tt.in {
				t.Errorf("pieces %v, rest %d bytes; want %v and %q, every byte once", got, len(rest), tt.want, tt.rest)
			}
		})
	}
}

// TestPumpDeadlineWithLongLine: a pump cut by its deadline with most of a
// line longer than MaxLine read (the rest, its newline and a last partial
// line still in the pipe) delivers the line cut as always, not as one
// piece the launcher's framing refuses (which lost the whole line on a
// loaded machine).
func TestPumpDeadlineWithLongLine(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, err := w.WriteString("L\nend"); err != nil {
		t.Fatal(err)
	}
	var got []int
	var all []byte
	rest := drainBuffered(r, []byte(strings.Repeat("L", MaxLine)), func(b []byte) {
		got = append(got, len(b))
		all = append(all, b...)
	})
	if want := []int{MaxLine + 1, 1}; !slices.Equal(got, want) || string(rest) != "end" {
		t.Errorf("pieces %v, rest %q; want %v and \"end\"", got, rest, want)
	}
	if want := strings.Repeat("L", MaxLine+1) + "\n"; string(all) != want {
		t.Errorf("the pieces hold %d bytes, want the %d of the line and its newline", len(all), len(want))
	}
}

// TestPumpProgressBar: a progress bar (tqdm: a carriage return, then the
// bar, redrawn) goes on state by state as each next one begins, not at
// the newline that ends the epoch; "\r\n" ends one line, also when its
// two bytes come in two reads; bytes are never changed.
func TestPumpProgressBar(t *testing.T) {
	for _, tt := range []struct {
		name   string
		writes []string
		want   []string // emitted chunks, read one write at a time
	}{
		{"tqdm", []string{"\r  0%|", "\r 50%|#", "\r100%|##", "\n"}, []string{"\r", "  0%|\r", " 50%|#\r", "100%|##\n"}},
		{"crlf in one read", []string{"a\r\nb\r\n"}, []string{"a\r\nb\r\n"}},
		{"crlf in two reads", []string{"a\r", "\nb\r", "\n"}, []string{"a\r\n", "b\r\n"}},
		{"a meter then a line", []string{"10 MB\r20 MB\r", "done\n"}, []string{"10 MB\r", "20 MB\rdone\n"}}, // the held state goes with what completes it
		{"a state at the end", []string{"\r99%"}, []string{"\r", "99%"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, w := io.Pipe()
			var chunks []string
			done := make(chan struct{})
			go func() {
				defer close(done)
				pump(r, func(b []byte) { chunks = append(chunks, string(b)) })
			}()
			for _, s := range tt.writes {
				if _, err := w.Write([]byte(s)); err != nil {
					t.Fatal(err)
				}
			}
			w.Close()
			<-done
			if !slices.Equal(chunks, tt.want) {
				t.Errorf("chunks %q, want %q", chunks, tt.want)
			}
		})
	}
}
