package hostfile

import (
	"errors"
	"fmt"
	"strings"
)

// maxListRangeHosts bounds the names the bracket ranges of one -H list
// expand to: more than any cluster typed on a command line, and a few
// bytes of -H cannot make a million hosts (hostfiles and allocations
// take up to MaxHosts).
const maxListRangeHosts = 1 << 14

// ParseList parses the launcher's -H flag: comma-separated
// [user@]host[:slots[:port]] entries. Slots default to 1; "host::2222" keeps
// the default slots and sets the SSH port. IPv6 literals go in brackets:
// "[fd00::1]:4". A host name with bracket ranges, as Slurm and pdsh write
// them, stands for every name it expands to, each with the entry's user,
// slots and port: "node[01-03,07]:8" is node01:8,node02:8,node03:8,node07:8
// (at most maxListRangeHosts names from ranges in one list).
// Repeated hosts (same user, name and port) merge in order of first
// appearance, adding slots, so "a,a,b" gives a:2,b:1. Errors are *ListError
// naming the entry; an empty list wraps ErrNoHosts.
func ParseList(s string) ([]Host, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("-H: %w", ErrNoHosts)
	}
	var m merger
	budget := maxListRangeHosts
	for i, entry := range splitOutsideBrackets(s) {
		entry = strings.TrimSpace(entry)
		hs, err := parseListEntries(entry, &budget)
		for _, h := range hs {
			if err != nil {
				break
			}
			err = m.add(h)
		}
		if err != nil {
			return nil, &ListError{Entry: i + 1, Text: entry, Msg: err.Error()}
		}
	}
	return m.hosts, nil
}

// splitOutsideBrackets splits s at the commas that no bracket holds
// ("n[1,3],b" is two entries); an unbalanced bracket is left for the
// entry's own parse to report.
func splitOutsideBrackets(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth = max(depth-1, 0)
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// parseListEntries parses one -H entry, expanding a host name with
// bracket ranges ("u@node[1-4]:2:2222") into one host per name, at most
// *budget of them, which it lowers.
func parseListEntries(entry string, budget *int) ([]Host, error) {
	user, rest := "", entry
	if u, r, ok := strings.Cut(entry, "@"); ok {
		user, rest = u+"@", r
	}
	if strings.HasPrefix(rest, "[") || !strings.Contains(rest, "[") {
		h, err := parseListEntry(entry)
		if err != nil {
			return nil, err
		}
		return []Host{h}, nil
	}
	cut, depth := len(rest), 0
	for i := 0; i < len(rest) && cut == len(rest); i++ {
		switch rest[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ':':
			if depth == 0 {
				cut = i
			}
		}
	}
	names, err := expandNodeList(rest[:cut], *budget)
	if errors.Is(err, ErrTooManyHosts) {
		return nil, fmt.Errorf("%w: the ranges of one -H expand to at most %d names (a hostfile takes more)", ErrTooManyHosts, maxListRangeHosts)
	}
	if err != nil {
		return nil, err
	}
	*budget -= len(names)
	hs := make([]Host, 0, len(names))
	for _, n := range names {
		h, err := parseListEntry(user + n + rest[cut:])
		if err != nil {
			return nil, err
		}
		hs = append(hs, h)
	}
	return hs, nil
}

func parseListEntry(entry string) (Host, error) {
	if entry == "" {
		return Host{}, errors.New("empty entry")
	}
	user, name, fields, err := splitHost(entry, false)
	if err != nil {
		return Host{}, err
	}
	h := Host{Name: name, User: user, Slots: 1}
	switch len(fields) {
	case 0:
	case 1:
		if h.Slots, err = parseNum("slots", fields[0], 1, MaxSlotCount); err != nil {
			return Host{}, err
		}
	case 2:
		if fields[0] != "" {
			if h.Slots, err = parseNum("slots", fields[0], 1, MaxSlotCount); err != nil {
				return Host{}, err
			}
		}
		if h.Port, err = parseNum("port", fields[1], 1, 65535); err != nil {
			return Host{}, err
		}
	default:
		return Host{}, errors.New(`too many ":" fields (want host:slots:port; put IPv6 addresses in brackets)`)
	}
	return h, nil
}

// splitHost splits "[user@]host[:field...]" into the user, the host name and
// the colon-separated fields after it, validating user and name. "[addr]"
// must hold an IP literal and is returned without brackets. With bareIPv6, a
// host that has two or more colons and parses whole as an IP address is
// taken as the name with no fields, as hostfiles write IPv6 literals.
func splitHost(tok string, bareIPv6 bool) (user, name string, fields []string, err error) {
	if u, rest, ok := strings.Cut(tok, "@"); ok {
		if u == "" {
			return "", "", nil, fmt.Errorf("empty user in %q", tok)
		}
		if err := validUser(u); err != nil {
			return "", "", nil, err
		}
		user, tok = u, rest
	}
	var tail string
	switch {
	case strings.HasPrefix(tok, "["):
		end := strings.IndexByte(tok, ']')
		if end < 0 {
			return "", "", nil, fmt.Errorf(`missing "]" in %q`, tok)
		}
		name, tail = tok[1:end], tok[end+1:]
		if !isIP(name) {
			return "", "", nil, fmt.Errorf("bad address %q in brackets", name)
		}
		if tail != "" && tail[0] != ':' {
			return "", "", nil, fmt.Errorf(`unexpected %q after "]"`, tail)
		}
	case bareIPv6 && strings.Count(tok, ":") >= 2 && isIP(tok):
		name = tok
	default:
		i := strings.IndexByte(tok, ':')
		if i < 0 {
			i = len(tok)
		}
		name, tail = tok[:i], tok[i:]
	}
	if err := validName(name); err != nil {
		return "", "", nil, err
	}
	if tail != "" {
		fields = strings.Split(tail[1:], ":")
	}
	return user, name, fields, nil
}
