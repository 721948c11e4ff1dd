package nccl

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// maxListEntries is NCCL's MAX_IFS: entries past it are silently dropped
// by NCCL, so parseList refuses them.
const maxListEntries = 16

// maxPrefix is the size of NCCL's netIf.prefix buffer, less the NUL.
const maxPrefix = 63

// errList is wrapped by every parseList error.
var errList = errors.New("bad NCCL list")

// list is a parsed NCCL interface or HCA list, as used by
// NCCL_SOCKET_IFNAME and NCCL_IB_HCA (NCCL's parseStringList and
// matchIfList).
type list struct {
	// Exclude inverts the list: a leading "^" selects what does not match.
	Exclude bool
	// Exact compares whole names: "=" after the optional "^".
	Exact   bool
	Entries []listEntry
}

// listEntry is one prefix[:port[:rail[:plane]]] item.
type listEntry struct {
	Name string // prefix, or the whole name when the list is Exact
	Port int    // -1: any port
}

// parseList parses NCCL's list syntax: an optional "^" (exclude), then an
// optional "=" (exact names; "=^" is not special, the "^" is then part of
// the first name), then comma-separated prefix[:port[:rail[:plane]]]
// entries. Empty entries are skipped as NCCL skips them; an empty list
// matches everything.
//
// parseList is stricter than NCCL where NCCL silently misreads: more than
// maxListEntries entries, a port that is not an integer (NCCL's atoi makes
// it 0), a port with no name before it, a name too long for NCCL's buffer,
// or a NUL byte are errors.
func parseList(s string) (list, error) {
	var l list
	if strings.IndexByte(s, 0) >= 0 {
		return list{}, fmt.Errorf("%w %q: NUL byte", errList, s)
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
		e := listEntry{Name: name, Port: -1}
		if name == "" {
			return list{}, fmt.Errorf("%w %q: %q has no name before ':'", errList, s, item)
		}
		if len(name) > maxPrefix {
			return list{}, fmt.Errorf("%w %q: name %.16q... longer than %d bytes", errList, s, name, maxPrefix)
		}
		if hasPort {
			fields := strings.Split(port, ":")
			if len(fields) > 3 {
				return list{}, fmt.Errorf("%w %q: %q: want name[:port[:rail[:plane]]]", errList, s, item)
			}
			for i, f := range fields {
				n64, err := strconv.ParseInt(f, 10, 32)
				n := int(n64)
				if err != nil || n < -1 {
					return list{}, fmt.Errorf("%w %q: %q: bad %s %q", errList, s, item,
						[]string{"port", "rail", "plane"}[i], f)
				}
				if i == 0 {
					e.Port = n
				}
			}
		}
		if len(l.Entries) == maxListEntries {
			return list{}, fmt.Errorf("%w %q: more than %d entries (NCCL ignores the rest)", errList, s, maxListEntries)
		}
		l.Entries = append(l.Entries, e)
	}
	return l, nil
}

// Match reports whether NCCL would select the interface or HCA port name
// (port -1 for interfaces): a prefix (or, Exact, the whole name) and port
// match of some entry, inverted by Exclude. A list without entries matches
// everything, or nothing when it is "^" alone.
func (l list) Match(name string, port int) bool {
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
