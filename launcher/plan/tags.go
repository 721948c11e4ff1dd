package plan

import (
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/gangway-hpc/gangway/internal/term"
)

// TagStyle is how the console marks each rank line with its rank.
type TagStyle int

// Tag styles. mpirun and Hydra print rank output untagged unless asked
// (--tag-output, -prepend-rank); gangway tags for people at a terminal
// and, like them, not for scripts and pipes.
const (
	TagAuto   TagStyle = iota // TagRank when stdout is a terminal, else TagNone
	TagNone                   // the line exactly as the rank wrote it
	TagRank                   // "[R] text": Hydra's -prepend-rank (-l)
	TagMpirun                 // "[1,R]<stdout>:text": mpirun's --tag-output
)

var tagNames = [...]string{TagAuto: "auto", TagNone: "none", TagRank: "rank", TagMpirun: "mpirun"}

func (t TagStyle) String() string {
	if t >= 0 && int(t) < len(tagNames) {
		return tagNames[t]
	}
	return "TagStyle(" + strconv.Itoa(int(t)) + ")"
}

// Resolve turns TagAuto into the style for a console writing to stdout:
// rank tags for a terminal (a person), none for a pipe or a file (a
// script or harness, which expects what mpirun prints). Other styles are
// returned as they are. A terminal is a file that answers the terminal's
// own ioctl (/dev/null is a character device, but no terminal).
func (t TagStyle) Resolve(stdout io.Writer) TagStyle {
	if t != TagAuto {
		return t
	}
	if f, ok := stdout.(*os.File); ok && term.IsTerminal(f) {
		return TagRank
	}
	return TagNone
}

// ParseTagStyle parses --tags: auto, none, rank or mpirun.
func ParseTagStyle(s string) (TagStyle, error) {
	for t, name := range tagNames {
		if s == name {
			return TagStyle(t), nil
		}
	}
	return TagAuto, fmt.Errorf("want auto, none, rank or mpirun, got %q", s)
}
