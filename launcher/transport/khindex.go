package transport

import (
	"encoding/base64"
	"errors"
	"net"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// A known_hosts file of a cluster holds a line per host. x/crypto's
// knownhosts scans every line for every check, so a launcher of N hosts
// against a file of N lines did N^2 pattern matches under one lock (about
// 130 us per host at 1,024 lines, seconds at 10,000). khIndex gives the
// same answers as knownhosts.New over the same lines, with the common
// line (no marker, host names without wildcards, negations or hashing)
// looked up by name, and x/crypto's own callback over the other lines
// only (markers, wildcards, negations, hashed names), their numbering
// kept.
type khIndex struct {
	path string
	rest ssh.HostKeyCallback
	// noRest: rest holds no line (only comments and blanks), as in a
	// cluster's file of one plain line per host: a plain key's check
	// then skips x/crypto's callback, whose answer is known (no line
	// for the host), and its marshalling of the key.
	noRest bool
	lit    map[khAddr][]litKey // in line order
}

// litKey is a literal line's key, and its wire form for comparing.
type litKey struct {
	knownhosts.KnownKey
	blob string
}

// khAddr is a host and port as knownhosts matches them.
type khAddr struct{ host, port string }

// indexKnownHosts builds the index of a known_hosts file from its lines
// (every line one x/crypto parses, or a comment); path names the file in
// KnownKey.Filename.
func indexKnownHosts(path string, lines []string) (ssh.HostKeyCallback, error) {
	ix := &khIndex{path: path, lit: map[khAddr][]litKey{}, noRest: true}
	rest := make([]string, len(lines))
	for i, l := range lines {
		addrs, key, ok := literalLine(l)
		if !ok {
			rest[i] = l
			if t := strings.Trim(l, " \t\r"); t != "" && t[0] != '#' {
				ix.noRest = false
			}
			continue
		}
		blob := string(key.Marshal())
		for _, a := range addrs {
			ix.lit[a] = append(ix.lit[a], litKey{KnownKey: knownhosts.KnownKey{Key: key, Filename: path, Line: i + 1}, blob: blob})
		}
	}
	var err error
	if ix.rest, err = knownHostsFrom(path, rest); err != nil {
		return nil, err
	}
	return ix.check, nil
}

// check is knownhosts' callback: a certificate is checked by the CA
// lines alone, all of them in rest; a plain key is accepted when any line
// for the host holds it (and no @revoked line does), else refused with
// every line for the host in KeyError.Want.
func (ix *khIndex) check(hostname string, remote net.Addr, key ssh.PublicKey) error {
	var ke *knownhosts.KeyError
	_, cert := key.(*ssh.Certificate)
	if ix.noRest && !cert && splits(remote.String()) && (hostname == "" || splits(hostname)) {
		ke = &knownhosts.KeyError{} // x/crypto's answer over no lines
	} else {
		err := ix.rest(hostname, remote, key)
		if cert || err == nil {
			return err
		}
		if !errors.As(err, &ke) {
			return err // revoked, or an address that does not split
		}
	}
	address := hostname
	if address == "" {
		address = remote.String()
	}
	host, port, serr := net.SplitHostPort(address)
	if serr != nil {
		return ke
	}
	lits := ix.lit[khAddr{host, port}]
	blob := key.Marshal()
	for _, k := range lits {
		if k.blob == string(blob) {
			return nil
		}
	}
	want := make([]knownhosts.KnownKey, 0, len(ke.Want)+len(lits))
	for _, k := range ke.Want {
		k.Filename = ix.path
		want = append(want, k)
	}
	for _, k := range lits {
		want = append(want, k.KnownKey)
	}
	slices.SortFunc(want, func(a, b knownhosts.KnownKey) int { return a.Line - b.Line })
	return &knownhosts.KeyError{Want: want}
}

// literalLine parses a known_hosts line as knownhosts does when it has no
// marker and only literal host patterns, returning the addresses it
// names and its key; ok is false for any other line (comments included).
func literalLine(line string) (addrs []khAddr, key ssh.PublicKey, ok bool) {
	l := strings.Trim(strings.TrimSuffix(line, "\r"), " \t")
	if l == "" || l[0] == '#' || l[0] == '@' || l[0] == '|' {
		return nil, nil, false
	}
	pattern, l := nextField(l)
	wantType, l := nextField(l)
	blob, _ := nextField(l)
	if strings.ContainsAny(pattern, "*?!") || wantType == "" || blob == "" {
		return nil, nil, false
	}
	b, err := base64.StdEncoding.DecodeString(blob)
	if err != nil {
		return nil, nil, false
	}
	if key, err = ssh.ParsePublicKey(b); err != nil || key.Type() != wantType {
		return nil, nil, false
	}
	for _, p := range strings.Split(pattern, ",") {
		if p == "" {
			continue
		}
		var a khAddr
		if a.host, a.port, err = net.SplitHostPort(p); err != nil {
			if p[0] == '[' {
				return nil, nil, false // knownhosts refuses it
			}
			a = khAddr{p, "22"}
		}
		addrs = append(addrs, a)
	}
	return addrs, key, len(addrs) > 0
}

// nextField is the text up to the first space or tab, and the rest with
// its leading blanks gone (knownhosts' nextWord).
func nextField(s string) (string, string) {
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimLeft(s[i:], " \t")
}

// splits reports whether knownhosts can split address into a host and
// a port (else its callback fails, and the index asks it for its error).
func splits(address string) bool {
	_, _, err := net.SplitHostPort(address)
	return err == nil
}
