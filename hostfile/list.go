package hostfile

import (
	"errors"
	"fmt"
	"strings"
)

// ParseList parses the launcher's -H flag: comma-separated
// [user@]host[:slots[:port]] entries. Slots default to 1; "host::2222" keeps
// the default slots and sets the SSH port. IPv6 literals go in brackets:
// "[fd00::1]:4". A host may be a Slurm-style range, "gpu[01-04,07]:8": every
// name it expands to (ExpandNodeList) gets the entry's user, slots and port,
// and commas inside its brackets do not split entries. Repeated hosts (same
// user, name and port) merge in order of first appearance, adding slots, so
// "a,a,b" gives a:2,b:1. Errors are *ListError naming the entry; an empty
// list wraps ErrNoHosts.
func ParseList(s string) ([]Host, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("-H: %w", ErrNoHosts)
	}
	var m merger
	for i, entry := range splitEntries(s) {
		entry = strings.TrimSpace(entry)
		hosts, err := parseListEntry(entry)
		if err == nil {
			err = m.addAll(hosts)
		}
		if err != nil {
			return nil, &ListError{Entry: i + 1, Text: entry, Msg: err.Error()}
		}
	}
	return m.hosts, nil
}

// splitEntries splits a -H list at the commas outside brackets, so that
// "gpu[01-04,07]:8,cpu1" is two entries. An unmatched bracket is left for
// the entry's parser to report.
func splitEntries(s string) []string {
	var out []string
	for {
		i := indexOutsideBrackets(s, ',')
		if i == len(s) {
			return append(out, s)
		}
		out = append(out, s[:i])
		s = s[i+1:]
	}
}

func parseListEntry(entry string) ([]Host, error) {
	if entry == "" {
		return nil, errors.New("empty entry")
	}
	user, names, fields, err := splitHost(entry, false)
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
	case 2:
		if fields[0] != "" {
			if h.Slots, err = parseNum("slots", fields[0], 1, MaxSlotCount); err != nil {
				return nil, err
			}
		}
		if h.Port, err = parseNum("port", fields[1], 1, 65535); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New(`too many ":" fields (want host:slots:port; put IPv6 addresses in brackets)`)
	}
	return h.each(names), nil
}

// splitHost splits "[user@]host[:field...]" into the user, the host names
// and the colon-separated fields after them, validating user and names.
// "[addr]" must hold an IP literal and is returned without brackets; a
// host with brackets after its first character is a Slurm-style range
// ("gpu[01-04,07]") and is returned expanded. With bareIPv6, a host that has
// two or more colons and parses whole as an IP address is taken as the name
// with no fields, as hostfiles write IPv6 literals.
func splitHost(tok string, bareIPv6 bool) (user string, names, fields []string, err error) {
	if u, rest, ok := strings.Cut(tok, "@"); ok {
		if u == "" {
			return "", nil, nil, fmt.Errorf("empty user in %q", tok)
		}
		if err := validUser(u); err != nil {
			return "", nil, nil, err
		}
		user, tok = u, rest
	}
	var name, tail string
	switch {
	case strings.HasPrefix(tok, "["):
		end := strings.IndexByte(tok, ']')
		if end < 0 {
			return "", nil, nil, fmt.Errorf(`missing "]" in %q`, tok)
		}
		name, tail = tok[1:end], tok[end+1:]
		if !isIP(name) {
			return "", nil, nil, fmt.Errorf("bad address %q in brackets", name)
		}
		if tail != "" && tail[0] != ':' {
			return "", nil, nil, fmt.Errorf(`unexpected %q after "]"`, tail)
		}
		if err := validName(name); err != nil {
			return "", nil, nil, err
		}
		names = []string{name}
	case bareIPv6 && strings.Count(tok, ":") >= 2 && isIP(tok):
		if err := validName(tok); err != nil {
			return "", nil, nil, err
		}
		names = []string{tok}
	default:
		i := indexOutsideBrackets(tok, ':')
		name, tail = tok[:i], tok[i:]
		if names, err = expandName(name); err != nil {
			return "", nil, nil, err
		}
	}
	if tail != "" {
		fields = strings.Split(tail[1:], ":")
	}
	return user, names, fields, nil
}

// indexOutsideBrackets is the index of the first c in s outside
// brackets, or len(s). A "]" with no "[" open is passed over.
func indexOutsideBrackets(s string, c byte) int {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth = max(depth-1, 0)
		case c:
			if depth == 0 {
				return i
			}
		}
	}
	return len(s)
}

// expandName validates one host name, or expands a Slurm-style range
// ("gpu[01-04,07]") to the names it stands for, each validated. A comma
// outside the brackets is refused: a range names one pattern.
func expandName(name string) ([]string, error) {
	if !strings.ContainsAny(name, "[]") {
		if err := validName(name); err != nil {
			return nil, err
		}
		return []string{name}, nil
	}
	if name == "" || name[0] == '[' || name[0] == ']' {
		return nil, fmt.Errorf("bad host range %q: want a name before \"[\", as in gpu[01-04]", name)
	}
	if indexOutsideBrackets(name, ',') < len(name) {
		return nil, fmt.Errorf("bad host name %q: contains ','", name)
	}
	names, err := ExpandNodeList(name)
	if err != nil {
		return nil, fmt.Errorf("bad host range: %w", err)
	}
	return names, nil
}
