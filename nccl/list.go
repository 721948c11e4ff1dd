package nccl

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxListEntries is NCCL's MAX_IFS: entries past it are silently dropped
// by NCCL, so ParseList refuses them.
const MaxListEntries = 16

// maxPrefix is the size of NCCL's netIf.prefix buffer, less the NUL.
const maxPrefix = 63

// ErrList is wrapped by every ParseList error.
var ErrList = errors.New("bad NCCL list")

// List is a parsed NCCL interface or HCA list, as used by
// NCCL_SOCKET_IFNAME and NCCL_IB_HCA (NCCL's parseStringList and
// matchIfList).
type List struct {
	// Exclude inverts the list: a leading "^" selects what does not match.
	Exclude bool
	// Exact compares whole names: "=" after the optional "^".
	Exact   bool
	Entries []ListEntry
}

// ListEntry is one prefix[:port[:rail[:plane]]] item.
type ListEntry struct {
	Name string // prefix, or the whole name when the list is Exact
	Port int    // -1: any port
}

// ParseList parses NCCL's list syntax: an optional "^" (exclude), then an
// optional "=" (exact names; "=^" is not special, the "^" is then part of
// the first name), then comma-separated prefix[:port[:rail[:plane]]]
// entries. Empty entries are skipped as NCCL skips them; an empty list
// matches everything.
//
// ParseList is stricter than NCCL where NCCL silently misreads: more than
// MaxListEntries entries, a port that is not an integer (NCCL's atoi makes
// it 0), a port with no name before it, a name too long for NCCL's buffer,
// or a NUL byte are errors.
func ParseList(s string) (List, error) {
	var l List
	if strings.IndexByte(s, 0) >= 0 {
		return List{}, fmt.Errorf("%w %q: NUL byte", ErrList, s)
	}
	rest := s
	if strings.HasPrefix(rest, "^") {
		l.Exclude, rest = true, rest[1:]
	}
	if strings.HasPrefix(rest, "=") {
		l.Exact, rest = true, rest[1:]
	}
	if rest == "" {
		return l, nil
	}
	for item := range strings.SplitSeq(rest, ",") {
		if item == "" {
			continue
		}
		name, port, hasPort := strings.Cut(item, ":")
		e := ListEntry{Name: name, Port: -1}
		if name == "" {
			return List{}, fmt.Errorf("%w %q: %q has no name before ':'", ErrList, s, item)
		}
		if len(name) > maxPrefix {
			return List{}, fmt.Errorf("%w %q: name %.16q... longer than %d bytes", ErrList, s, name, maxPrefix)
		}
		if hasPort {
			fields := strings.Split(port, ":")
			if len(fields) > 3 {
				return List{}, fmt.Errorf("%w %q: %q: want name[:port[:rail[:plane]]]", ErrList, s, item)
			}
			for i, f := range fields {
				n64, err := strconv.ParseInt(f, 10, 32)
				n := int(n64)
				if err != nil || n < -1 {
					return List{}, fmt.Errorf("%w %q: %q: bad %s %q", ErrList, s, item,
						[]string{"port", "rail", "plane"}[i], f)
				}
				if i == 0 {
					e.Port = n
				}
			}
		}
		if len(l.Entries) == MaxListEntries {
			return List{}, fmt.Errorf("%w %q: more than %d entries (NCCL ignores the rest)", ErrList, s, MaxListEntries)
		}
		l.Entries = append(l.Entries, e)
	}
	return l, nil
}

// Match reports whether NCCL would select the interface or HCA port name
// (port -1 for interfaces): a prefix (or, Exact, the whole name) and port
// match of some entry, inverted by Exclude. A list without entries matches
// everything, or nothing when it is "^" alone.
func (l List) Match(name string, port int) bool {
	hit := len(l.Entries) == 0
	for _, e := range l.Entries {
		nameOK := strings.HasPrefix(name, e.Name)
		if l.Exact {
			nameOK = name == e.Name
		}
		if nameOK && (e.Port == -1 || port == -1 || e.Port == port) {
			hit = true
			break
		}
	}
	return hit != l.Exclude
}

// String formats the list in NCCL syntax (rail and plane are not kept).
func (l List) String() string {
	var b strings.Builder
	if l.Exclude {
		b.WriteByte('^')
	}
	if l.Exact {
		b.WriteByte('=')
	}
	// A first name that starts with a marker NCCL would read as one gets
	// an empty entry (which NCCL skips) in front.
	if len(l.Entries) > 0 && !l.Exact {
		if first := l.Entries[0].Name; first[0] == '=' || (first[0] == '^' && !l.Exclude) {
			b.WriteByte(',')
		}
	}
	for i, e := range l.Entries {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e.Name)
		if e.Port != -1 {
			b.WriteString(":" + strconv.Itoa(e.Port))
		}
	}
	return b.String()
}
