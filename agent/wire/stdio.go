package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/gangway-hpc/gangway/internal/textx"
)

// StdioMarker is the line `agent --stdio --stdio-marker` writes on its
// stdout before the session. The launcher's ssh transport starts the
// agent through the user's shell, which may print first (a ~/.bashrc
// with a greeting or environment modules' banners): the session begins
// after this line, and what came before it is the shell's.
const StdioMarker = "GANGWAY-AGENT-STDIO 1\n"

// MaxStdioNoise bounds what a shell may print before StdioMarker.
const MaxStdioNoise = 64 << 10

// ErrNoStdioMarker says a stream ended, or passed MaxStdioNoise, before
// StdioMarker.
var ErrNoStdioMarker = errors.New("no agent session began")

// StdioReader reads a stream that begins with what a shell printed and
// then StdioMarker: Read returns what follows the marker. Noise is what
// came before it, once the marker has been read.
type StdioReader struct {
	r      io.Reader
	buf    []byte // read ahead of the marker's end, not yet returned
	found  bool
	err    error
	noise  []byte
	onFind func(noise []byte)
}

// NewStdioReader reads r; onFind (may be nil) is called once, with what
// came before the marker, when it is found.
func NewStdioReader(r io.Reader, onFind func(noise []byte)) *StdioReader {
	return &StdioReader{r: r, onFind: onFind}
}

// Noise is what came before the marker (nil before it is found).
func (s *StdioReader) Noise() []byte { return s.noise }

func (s *StdioReader) Read(p []byte) (int, error) {
	if !s.found {
		if err := s.find(); err != nil {
			return 0, err
		}
	}
	if len(s.buf) > 0 {
		n := copy(p, s.buf)
		s.buf = s.buf[n:]
		return n, nil
	}
	return s.r.Read(p)
}

// find reads until the marker, keeping what follows it in buf.
func (s *StdioReader) find() error {
	if s.err != nil {
		return s.err
	}
	chunk := make([]byte, 4096)
	for {
		i := bytes.Index(s.buf, []byte(StdioMarker))
		if i >= 0 && i <= MaxStdioNoise {
			s.noise = bytes.Clone(s.buf[:i])
			s.buf = s.buf[i+len(StdioMarker):]
			s.found = true
			if s.onFind != nil {
				s.onFind(s.noise)
			}
			return nil
		}
		if i > MaxStdioNoise || len(s.buf) > MaxStdioNoise+len(StdioMarker) {
			s.err = &StdioNoiseError{Printed: textx.ClipMore(s.buf, MaxNoiseShown), Err: fmt.Errorf("%w: more than %d bytes before it", ErrNoStdioMarker, MaxStdioNoise)}
			return s.err
		}
		n, err := s.r.Read(chunk)
		s.buf = append(s.buf, chunk[:n]...)
		if err != nil && n == 0 {
			if len(s.buf) == 0 {
				s.err = err // nothing at all: the stream's own end (ssh said why)
			} else {
				s.err = &StdioNoiseError{Printed: textx.ClipMore(s.buf, MaxNoiseShown), Err: fmt.Errorf("%w: %w", ErrNoStdioMarker, err)}
			}
			return s.err
		}
	}
}

// StdioNoiseError is a stream that printed something and never began a
// session.
type StdioNoiseError struct {
	Printed string // the start of what was printed
	Err     error
}

func (e *StdioNoiseError) Error() string {
	return fmt.Sprintf("%v (printed on stdout: %q)", e.Err, e.Printed)
}

func (e *StdioNoiseError) Unwrap() error { return e.Err }

// MaxNoiseShown bounds what a message quotes of a shell's noise.
const MaxNoiseShown = 200
