package wire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestStdioReader(t *testing.T) {
	session := "\x07\x00\x00\x00\x03abc" // a frame's bytes
	for _, tc := range []struct {
		name, in  string
		noise     string
		want      string // what Read gives after the marker
		err       error  // nil: read to EOF without error
		errSubstr string
	}{
		{"clean shell", StdioMarker + session, "", session, nil, ""},
		{"bashrc greeting", "Welcome to dgx01, alice\nmodule: loading cuda/12.2\n" + StdioMarker + session, "Welcome to dgx01, alice\nmodule: loading cuda/12.2\n", session, nil, ""},
		{"noise without a newline", "no newline here" + StdioMarker + session, "no newline here", session, nil, ""},
		{"nothing after the marker", "x\n" + StdioMarker, "x\n", "", nil, ""},
		{"the marker twice: the second is session bytes", StdioMarker + StdioMarker, "", StdioMarker, nil, ""},
		{"ended before the marker", "Welcome\nbash: agent: command not found\n", "", "", ErrNoStdioMarker, `printed on stdout: "Welcome\nbash: agent: command not found\n"`},
		{"half a marker", "hi\n" + StdioMarker[:10], "", "", ErrNoStdioMarker, ""},
		{"too much noise", strings.Repeat("y", MaxStdioNoise+100) + StdioMarker, "", "", ErrNoStdioMarker, "more than 65536 bytes before it"},
		{"empty stream: the stream's own end", "", "", "", io.EOF, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, oneByte := range []bool{false, true} {
				var r io.Reader = strings.NewReader(tc.in)
				if oneByte {
					r = iotest.OneByteReader(r)
				}
				var called [][]byte
				sr := NewStdioReader(r, func(n []byte) { called = append(called, n) })
				got, err := io.ReadAll(sr)
				if tc.err == io.EOF {
					// ReadAll's nil for EOF: nothing read, nothing found.
					if err != nil || len(got) != 0 || len(called) != 0 {
						t.Fatalf("read %q, error %v, found %d times", got, err, len(called))
					}
					continue
				}
				switch {
				case tc.err == nil && err != nil:
					t.Fatalf("one byte %v: %v", oneByte, err)
				case tc.err != nil && !errors.Is(err, tc.err):
					t.Fatalf("one byte %v: error %v, want %v", oneByte, err, tc.err)
				case tc.errSubstr != "" && !strings.Contains(err.Error(), tc.errSubstr):
					t.Fatalf("error %q lacks %q", err, tc.errSubstr)
				}
				if tc.err != nil {
					if len(called) != 0 {
						t.Errorf("onFind called without a marker")
					}
					continue
				}
				if string(got) != tc.want || string(sr.Noise()) != tc.noise {
					t.Errorf("one byte %v: read %q, noise %q; want %q, %q", oneByte, got, sr.Noise(), tc.want, tc.noise)
				}
				if len(called) != 1 || !bytes.Equal(called[0], []byte(tc.noise)) {
					t.Errorf("onFind called %d times (%q), want once with the noise", len(called), called)
				}
			}
		})
	}
}

// FuzzStdioReader: whatever comes before the marker is the noise, and
// everything after it is read back unchanged; a stream without the
// marker ends in ErrNoStdioMarker (or its own EOF when empty), never a
// panic or a hang.
func FuzzStdioReader(f *testing.F) {
	f.Add("Welcome\n", "\x01\x00\x00\x00\x00")
	f.Add("", "")
	f.Add("GANGWAY-AGENT-STDIO", "1\n")
	f.Add(strings.Repeat("z", 5000), StdioMarker)
	f.Fuzz(func(t *testing.T, noise, rest string) {
		in := noise + StdioMarker + rest
		got, err := io.ReadAll(NewStdioReader(strings.NewReader(in), nil))
		first := strings.Index(in, StdioMarker)
		switch {
		case first > MaxStdioNoise:
			if !errors.Is(err, ErrNoStdioMarker) {
				t.Fatalf("%d bytes of noise: error %v", first, err)
			}
		case err != nil:
			t.Fatalf("error %v", err)
		case string(got) != in[first+len(StdioMarker):]:
			t.Fatalf("read %q, want what follows the first marker", got)
		}
		// Without the marker: an error, never the noise as session bytes.
		if !strings.Contains(noise, StdioMarker) {
			got, err := io.ReadAll(NewStdioReader(strings.NewReader(noise), nil))
			if len(got) != 0 || err == nil && noise != "" {
				t.Fatalf("no marker: read %q, error %v", got, err)
			}
		}
	})
}
