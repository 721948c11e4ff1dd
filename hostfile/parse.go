package hostfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gangway-hpc/gangway/internal/textx"
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
// Open MPI's other spellings are read as it reads them: cpu=N and count=N
// are slots=N; max-slots=M (and slots_max, cpu_max, count_max, with "-" or
// "_") is max_slots=M. A host may be a Slurm-style range, "gpu[01-04,07]
// slots=8": every name it expands to gets the line's settings.
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
		hosts, err := parseLine(text)
		if err == nil {
			err = m.addAll(hosts)
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

// parseLine parses one hostfile line: the hosts it names (several for a
// range such as gpu[01-04]), none for a blank or comment-only line.
func parseLine(text string) ([]Host, error) {
	if i := strings.IndexByte(text, '#'); i >= 0 {
		text = text[:i]
	}
	words := strings.Fields(text)
	if len(words) == 0 {
		return nil, nil
	}
	user, names, fields, err := splitHost(words[0], true)
	if err != nil {
		return nil, err
	}
	h := Host{User: user, Slots: 1}
	switch len(fields) {
	case 0:
	case 1:
		if h.Slots, err = parseNum("slots", fields[0], 1, MaxSlotCount); err != nil {
			return nil, err
		}
		if len(words) > 1 {
			return nil, fmt.Errorf("unexpected %q after MPICH host:slots", words[1])
		}
		return h.each(names), nil
	default:
		return nil, fmt.Errorf(`too many ":" fields in %q (MPICH form is host:slots)`, words[0])
	}
	if err := parseKeys(&h, words[1:]); err != nil {
		return nil, err
	}
	return h.each(names), nil
}

// parseKeys sets h from a line's key=value fields. Each setting may be
// given once, under whichever of its spellings (slots=2 cpu=4 is an error).
func parseKeys(h *Host, words []string) error {
	seen := make(map[string]string, 3) // setting -> the key that gave it
	for _, w := range words {
		key, val, found := strings.Cut(w, "=")
		if !found {
			return fmt.Errorf("bad field %q: want key=value", w)
		}
		setting, ok := hostKeys[key]
		if !ok {
			if near := textx.Suggest(key, hostKeyNames); near != "" {
				return fmt.Errorf("unknown key %q: did you mean %s=%s?", key, near, val)
			}
			return fmt.Errorf("unknown key %q", key)
		}
		if prev, dup := seen[setting]; dup {
			if prev == key {
				return fmt.Errorf("duplicate key %q", key)
			}
			return fmt.Errorf("%s=%s repeats %s= (both give %s)", key, val, prev, setting)
		}
		seen[setting] = key
		var err error
		switch setting {
		case "slots":
			h.Slots, err = parseNum(key, val, 1, MaxSlotCount)
		case "max_slots":
			h.MaxSlots, err = parseNum(key, val, 1, MaxSlotCount)
		case "port":
			h.Port, err = parseNum(key, val, 1, 65535)
		}
		if err != nil {
			return err
		}
	}
	if h.MaxSlots != 0 && h.MaxSlots < h.Slots {
		return fmt.Errorf("max_slots %d is less than slots %d", h.MaxSlots, h.Slots)
	}
	return nil
}

// hostKeys maps each key an Open MPI hostfile line may give to the setting
// it gives, as Open MPI's (PRRTE's) hostfile lexer reads them: slots, cpu
// and count are the slots; max_slots, max-slots and their slots_max,
// cpu_max, count_max spellings the hard cap.
var hostKeys = map[string]string{
	"slots": "slots", "cpu": "slots", "count": "slots",
	"max_slots": "max_slots", "max-slots": "max_slots", "slots_max": "max_slots", "slots-max": "max_slots",
	"max_cpu": "max_slots", "max-cpu": "max_slots", "cpu_max": "max_slots", "cpu-max": "max_slots",
	"max_count": "max_slots", "max-count": "max_slots", "count_max": "max_slots", "count-max": "max_slots",
	"port": "port",
}

// hostKeyNames are the keys suggested for a misspelt one: the canonical
// spellings only (gpus=8 is not suggested cpu=8).
var hostKeyNames = []string{"slots", "max_slots", "port"}
