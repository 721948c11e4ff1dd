package hostfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"gangway/internal/textx"
)

// maxLineLen bounds one hostfile line; longer lines are an error rather
// than an unbounded allocation.
const maxLineLen = 1 << 20

// ParseFile reads the hostfile at path; errors name the path as given.
func ParseFile(path string) ([]Host, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot open hostfile: %w", err)
	}
	defer f.Close()
	return Parse(path, f)
}

// Parse reads a hostfile, detecting the format line by line:
//
//	[user@]host [slots=N] [max_slots=M] [port=P]   Open MPI, DeepSpeed, mpi-operator
//	[user@]host:N                                  MPICH
//	host                                           one slot; PBS node files repeat it
//
// "#" starts a comment anywhere on a line; blank lines and surrounding white
// space are ignored. Repeated hosts (same user, name and port) merge in
// order of first appearance, adding slots. IPv6 literals may be written bare
// or in brackets. Syntax and validation errors are *ParseError, printed as
// "name:line: msg"; a file without hosts wraps ErrNoHosts.
func Parse(name string, r io.Reader) ([]Host, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLineLen)
	var m merger
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if line == 1 {
			text = strings.TrimPrefix(text, "\uFEFF")
		}
		h, ok, err := parseLine(text)
		if err == nil && ok {
			err = m.add(h)
		}
		if err != nil {
			return nil, &ParseError{File: name, Line: line, Msg: err.Error()}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, &ParseError{File: name, Line: line + 1, Msg: fmt.Sprintf("line longer than %d bytes", maxLineLen)}
		}
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(m.hosts) == 0 {
		return nil, fmt.Errorf("%s: %w", name, ErrNoHosts)
	}
	return m.hosts, nil
}

// parseLine parses one hostfile line; ok is false for a blank or
// comment-only line.
func parseLine(text string) (h Host, ok bool, err error) {
	if i := strings.IndexByte(text, '#'); i >= 0 {
		text = text[:i]
	}
	words := strings.Fields(text)
	if len(words) == 0 {
		return Host{}, false, nil
	}
	user, name, fields, err := splitHost(words[0], true)
	if err != nil {
		return Host{}, false, err
	}
	h = Host{Name: name, User: user, Slots: 1}
	switch len(fields) {
	case 0:
	case 1:
		if h.Slots, err = parseNum("slots", fields[0], 1, MaxSlotCount); err != nil {
			return Host{}, false, err
		}
		if len(words) > 1 {
			return Host{}, false, fmt.Errorf("unexpected %q after MPICH host:slots", words[1])
		}
		return h, true, nil
	default:
		return Host{}, false, fmt.Errorf(`too many ":" fields in %q (MPICH form is host:slots)`, words[0])
	}
	seen := make(map[string]bool, len(hostKeys))
	for _, w := range words[1:] {
		key, val, found := strings.Cut(w, "=")
		if !found {
			return Host{}, false, fmt.Errorf("bad field %q: want key=value", w)
		}
		if seen[key] {
			return Host{}, false, fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		switch key {
		case "slots":
			h.Slots, err = parseNum("slots", val, 1, MaxSlotCount)
		case "max_slots":
			h.MaxSlots, err = parseNum("max_slots", val, 1, MaxSlotCount)
		case "port":
			h.Port, err = parseNum("port", val, 1, 65535)
		default:
			err = fmt.Errorf("unknown key %q", key)
			if near := textx.Suggest(key, hostKeys); near != "" {
				err = fmt.Errorf("unknown key %q: did you mean %s=%s?", key, near, val)
			}
		}
		if err != nil {
			return Host{}, false, err
		}
	}
	if h.MaxSlots != 0 && h.MaxSlots < h.Slots {
		return Host{}, false, fmt.Errorf("max_slots %d is less than slots %d", h.MaxSlots, h.Slots)
	}
	return h, true, nil
}

// hostKeys are the keys an Open MPI hostfile line may give.
var hostKeys = []string{"slots", "max_slots", "port"}
