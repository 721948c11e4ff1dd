package hostfile

import (
	"errors"
	"fmt"
	"strings"
)

// ParseList parses the launcher's -H flag: comma-separated
// [user@]host[:slots[:port]] entries. Slots default to 1; "host::2222" keeps
// the default slots and sets the SSH port. IPv6 literals go in brackets:
// "[fd00::1]:4". Repeated hosts (same user, name and port) merge in order of
// first appearance, adding slots, so "a,a,b" gives a:2,b:1. Errors are
// *ListError naming the entry; an empty list wraps ErrNoHosts.
func ParseList(s string) ([]Host, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("-H: %w", ErrNoHosts)
	}
	var m merger
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		h, err := parseListEntry(entry)
		if err == nil {
			err = m.add(h)
		}
		if err != nil {
			return nil, &ListError{Entry: i + 1, Text: entry, Msg: err.Error()}
		}
	}
	return m.hosts, nil
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
