package transport

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	sshconfig "github.com/kevinburke/ssh_config"

	"github.com/gangway-hpc/gangway/internal/textx"
)

// The OpenSSH client configuration (~/.ssh/config, then
// /etc/ssh/ssh_config; -F FILE or -F none instead) as the agent
// transport reads it. Parsing and Host matching are
// github.com/kevinburke/ssh_config's: Host patterns with * and ?,
// negation, Include, the first value obtained for a keyword wins. What
// the launcher adds: which keywords it applies, their tokens, and the
// order of precedence (the host list's user@ and :port, then flags,
// then the configuration, then defaults).
//
// Match blocks are read as ssh reads them (sshmatch.go): the library
// reads only "Match all" and "Match host", and that one against the
// alias rather than the HostName as ssh does, and a Match it cannot read
// would fail the whole file. A Match line the launcher does not read
// (canonical, final, localnetwork, tagged) is warned of and its block
// applies to no host. A Match in a file named by Include is the
// library's to read.

// SystemSSHConfig is the system-wide client configuration, read after
// the user's unless -F is given; tests point it elsewhere.
var SystemSSHConfig = "/etc/ssh/ssh_config"

// NoSSHConfig is -F's value that reads no configuration at all.
const NoSSHConfig = "none"

// sshConfig is the parsed client configuration: the user's file first,
// then the system's.
type sshConfig struct {
	files []*sshconfig.Config
	names []string // the files' paths, for messages
	home  string   // %d and ~
	local string   // %u: the local user
	// match holds the criteria of the Match blocks, by the Host name
	// that stands for each (matchName).
	match map[string]matchLine
	execs execCache // Match exec's commands, each run once
	// Warnings say what the configuration has that the launcher ignores.
	Warnings []string
}

// loadSSHConfig reads the configuration that -F (flagF) names: "" for
// home's .ssh/config and SystemSSHConfig (either may be missing), none
// for no configuration, else the file alone (which must exist), as ssh
// -F does.
func loadSSHConfig(flagF, home, local string) (*sshConfig, error) {
	c := &sshConfig{home: home, local: local}
	var paths []string
	mustExist := false
	switch flagF {
	case NoSSHConfig:
		return c, nil
	case "":
		paths = []string{filepath.Join(home, ".ssh", "config"), SystemSSHConfig}
	default:
		paths, mustExist = []string{expandTilde(flagF, home)}, true
	}
	for i, p := range paths {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) && !mustExist {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("ssh config: %w", err)
		}
		incDir := filepath.Join(home, ".ssh")
		if i == 1 {
			incDir = filepath.Dir(SystemSSHConfig)
		}
		b, matches, warns := prepareSSHConfig(p, len(c.files), b, incDir, home)
		for k, m := range matches {
			if c.match == nil {
				c.match = map[string]matchLine{}
			}
			c.match[k] = m
		}
		cfg, err := sshconfig.DecodeBytes(b)
		if err != nil {
			return nil, fmt.Errorf("ssh config %s: %w (give -F none to read no ssh configuration)", p, err)
		}
		c.files, c.names = append(c.files, cfg), append(c.names, p)
		c.Warnings = append(c.Warnings, warns...)
	}
	return c, nil
}

// prepareSSHConfig rewrites what the library would read otherwise than
// ssh does: a Match line becomes a Host block for a name no host has
// (matchName(file, n)), whose criteria matches holds for resolve to
// decide, or, where the launcher does not read the line, a block for no
// host (with a warning); a relative Include path becomes absolute under
// incDir (the user's ~/.ssh, or the system file's directory), ~/ under
// home.
func prepareSSHConfig(path string, file int, b []byte, incDir, home string) ([]byte, map[string]matchLine, []string) {
	var out bytes.Buffer
	var warns []string
	matches := map[string]matchLine{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		key, val := splitKeyword(strings.TrimSpace(line))
		switch strings.ToLower(key) {
		case "match":
			m, err := parseMatch(val)
			if err != nil {
				warns = append(warns, fmt.Sprintf("%s:%d: Match %s: %v; its block is ignored", path, n, val, err))
				line = "Host !*"
				break
			}
			name := matchName(file, len(matches))
			matches[name] = m
			line = "Host " + name
		case "include":
			words := strings.Fields(val)
			for i, w := range words {
				w = expandTilde(w, home)
				if !filepath.IsAbs(w) {
					w = filepath.Join(incDir, w)
				}
				words[i] = w
			}
			line = "Include " + strings.Join(words, " ")
		}
		out.WriteString(line)
		out.WriteByte('\n')
	}
	return out.Bytes(), matches, warns
}

// splitKeyword splits "Keyword value" or "Keyword=value".
func splitKeyword(line string) (key, val string) {
	i := strings.IndexAny(line, " \t=")
	if i < 0 {
		return line, ""
	}
	val = strings.TrimSpace(line[i:])
	return line[:i], strings.TrimSpace(strings.TrimPrefix(val, "="))
}

// hostBlocks are, file by file, the Host blocks whose patterns match one
// alias. The library's Get and GetAll match every block's patterns
// (regular expressions) again for each keyword, and resolve reads about
// a dozen: against a user's configuration of some 40 blocks that was 31
// us a host, a tenth of the launcher's whole cost per host at 10,000
// hosts. resolve matches once and reads the keywords from the blocks
// that matched, as Get and GetAll read them (the first value obtained
// wins; an Include inside a block is searched as the library does).
type hostBlocks [][]*sshconfig.Host

// blocks matches alias (the name as given) against every file's Host
// blocks, and decides its Match blocks in order, each on the
// HostName and User the blocks before it give (d: the host list's user
// and port, which come first, as ssh's command line does).
func (c *sshConfig) blocks(alias string, d hostDefaults) hostBlocks {
	b := make(hostBlocks, len(c.files))
	for i, f := range c.files {
		for _, h := range f.Hosts {
			if m, ok := c.matchOf(h); ok {
				if !m.holds(c.matchFacts(b, alias, d), c.execs.run) {
					continue
				}
			} else if !hostMatches(h, alias) {
				continue
			}
			b[i] = append(b[i], h)
		}
	}
	return b
}

// hostMatches is ssh's match of a Host line: the name as given against
// each pattern as written (* and ?), case and all (OpenSSH 9.2: ssh -G
// NODE2 does not read "Host node2"), no negated pattern matching. Not
// the library's Matches: its regular expression takes ? for zero or one
// byte ("node??" took node1), where ssh's is exactly one.
func hostMatches(h *sshconfig.Host, name string) bool {
	found := false
	for _, p := range h.Patterns {
		pat := p.String()
		neg := strings.HasPrefix(pat, "!")
		if !textx.MatchPattern(strings.TrimPrefix(pat, "!"), name) {
			continue
		}
		if neg {
			return false
		}
		found = true
	}
	return found
}

// matchOf is the Match line a block stands for, if it is one.
func (c *sshConfig) matchOf(h *sshconfig.Host) (matchLine, bool) {
	if len(c.match) == 0 || len(h.Patterns) != 1 {
		return nil, false
	}
	m, ok := c.match[h.Patterns[0].String()]
	return m, ok
}

// matchFacts are what a Match line is decided on for alias, given the
// blocks that matched before it (b) and the host list's user and port.
func (c *sshConfig) matchFacts(b hostBlocks, alias string, d hostDefaults) matchFacts {
	f := matchFacts{Host: alias, Original: alias, User: d.User, Local: c.local, Port: d.Port, Home: c.home}
	if v := b.get(alias, "HostName"); v != "" {
		f.Host = expandTokens(v, map[byte]string{'h': alias, 'n': alias})
	}
	if f.User == "" {
		f.User = b.get(alias, "User")
	}
	if f.User == "" {
		f.User = c.local
	}
	if f.Port == 0 {
		f.Port = cmp.Or(d.FlagPort, atoiOr(b.get(alias, "Port"), d.DefPort))
	}
	return f
}

// atoiOr is s as a number, else def.
func atoiOr(s string, def int) int {
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	return def
}

// get is the first value for key in the blocks, as Config.Get gives it
// file by file, the first file's first: a file's first value for key
// ends its search, empty or not.
func (b hostBlocks) get(alias, key string) string {
	for _, hosts := range b {
		var v string
		walkNodes(hosts, func(n sshconfig.Node) bool {
			switch t := n.(type) {
			case *sshconfig.KV:
				if strings.EqualFold(t.Key, key) {
					v = t.Value
					return false
				}
			case *sshconfig.Include:
				v = t.Get(alias, key)
				return v == ""
			}
			return true
		})
		if v != "" {
			return v
		}
	}
	return ""
}

// getAll is every value for key in the blocks, in order, as
// Config.GetAll gives them file by file.
func (b hostBlocks) getAll(alias, key string) []string {
	var all []string
	for _, hosts := range b {
		walkNodes(hosts, func(n sshconfig.Node) bool {
			switch t := n.(type) {
			case *sshconfig.KV:
				if strings.EqualFold(t.Key, key) {
					all = append(all, t.Value)
				}
			case *sshconfig.Include:
				v, _ := t.GetAll(alias, key)
				all = append(all, v...)
			}
			return true
		})
	}
	return all
}

// walkNodes calls fn for every line of hosts' blocks in order until fn
// returns false.
func walkNodes(hosts []*sshconfig.Host, fn func(sshconfig.Node) bool) {
	for _, h := range hosts {
		for _, n := range h.Nodes {
			if !fn(n) {
				return
			}
		}
	}
}

// hostConfig is how to reach one host (a target or a jump host): what
// the host list and flags give, completed from the configuration.
type hostConfig struct {
	Alias    string // the name as given (-H, a hostfile, ProxyJump)
	HostName string // what is dialed (HostName, else Alias)
	Port     int
	User     string
	// IdentityFiles are the IdentityFile values, tokens expanded; none
	// means the default identities.
	IdentityFiles  []string
	IdentitiesOnly bool
	// Jumps are ProxyJump's hosts, first dialed first; nil: none.
	Jumps          []jumpHost
	ConnectTimeout time.Duration
	// StrictHostKeyChecking is the keyword's value, lower-cased ("" when
	// not set).
	StrictHostKeyChecking string
	UserKnownHostsFile    string // the first file named, expanded; "" when not set
	// ServerAliveInterval and ServerAliveCountMax: the keepalives'
	// timing (keepaliveFor); 0 when not set.
	ServerAliveInterval time.Duration
	ServerAliveCountMax int
}

// Addr is host:port to dial.
func (h hostConfig) Addr() string { return net.JoinHostPort(h.HostName, strconv.Itoa(h.Port)) }

// hostDefaults are the values of the launcher's own (flags or defaults)
// that a configuration keyword may override or not.
type hostDefaults struct {
	// User and Port given for this host (user@host, host:slots:port, or
	// a ProxyJump's user@ and :port): they win over the configuration.
	User string
	Port int
	// FlagPort is -p when given: it wins over the configuration.
	FlagPort int
	// DefUser and DefPort apply when nothing else sets them.
	DefUser string
	DefPort int
}

// resolve is the configuration of the host called name (matched
// against the Host patterns as given, as ssh does) with d applied in
// order of precedence: the host's own user and port, then -p, then the
// configuration, then the defaults.
func (c *sshConfig) resolve(name string, d hostDefaults) (hostConfig, error) {
	h := hostConfig{Alias: name}
	h.HostName = name
	alias := name
	bl := c.blocks(alias, d)
	get := func(key string) string { return bl.get(alias, key) }
	if v := get("HostName"); v != "" {
		h.HostName = expandTokens(v, map[byte]string{'h': alias, 'n': alias})
	}
	switch {
	case d.Port != 0:
		h.Port = d.Port
	case d.FlagPort != 0:
		h.Port = d.FlagPort
	default:
		h.Port = d.DefPort
		if v := get("Port"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 65535 {
				return h, fmt.Errorf("ssh config: Port %q for %s: want 1 to 65535", v, name)
			}
			h.Port = n
		}
	}
	h.User = d.User
	if h.User == "" {
		h.User = get("User")
	}
	if h.User == "" {
		h.User = d.DefUser
	}
	tokens := map[byte]string{'h': h.HostName, 'n': alias, 'p': strconv.Itoa(h.Port), 'r': h.User, 'u': c.local, 'd': c.home}
	for _, f := range bl.getAll(alias, "IdentityFile") {
		if strings.EqualFold(f, "none") {
			continue
		}
		h.IdentityFiles = append(h.IdentityFiles, expandTilde(expandTokens(f, tokens), c.home))
	}
	h.IdentitiesOnly = strings.EqualFold(get("IdentitiesOnly"), "yes")
	if v := get("ConnectTimeout"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return h, fmt.Errorf("ssh config: ConnectTimeout %q for %s: want seconds", v, name)
		}
		h.ConnectTimeout = time.Duration(n) * time.Second
	}
	if v := get("ServerAliveInterval"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 3600 {
			return h, fmt.Errorf("ssh config: ServerAliveInterval %q for %s: want seconds from 0 to 3600", v, name)
		}
		h.ServerAliveInterval = time.Duration(n) * time.Second
	}
	if v := get("ServerAliveCountMax"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return h, fmt.Errorf("ssh config: ServerAliveCountMax %q for %s: want a count from 1 to 1000", v, name)
		}
		h.ServerAliveCountMax = n
	}
	h.StrictHostKeyChecking = strings.ToLower(get("StrictHostKeyChecking"))
	if f := strings.Fields(get("UserKnownHostsFile")); len(f) > 0 {
		h.UserKnownHostsFile = expandTilde(expandTokens(f[0], tokens), c.home)
	}
	if v := get("ProxyJump"); v != "" {
		jumps, err := parseProxyJump(expandTokens(v, tokens))
		if err != nil {
			return h, fmt.Errorf("ssh config: ProxyJump for %s: %w", name, err)
		}
		h.Jumps = jumps
	}
	return h, nil
}

// expandTokens replaces ssh_config's %x tokens that tokens holds, and
// %% with %; other tokens stay as written.
func expandTokens(s string, tokens map[byte]string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		if s[i] == '%' {
			b.WriteByte('%')
		} else if v, ok := tokens[s[i]]; ok {
			b.WriteString(v)
		} else {
			b.WriteByte('%')
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// expandTilde makes a leading ~/ (or a lone ~) home.
func expandTilde(p, home string) string {
	if p == "~" {
		return home
	}
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		return filepath.Join(home, rest)
	}
	return p
}

// jumpHost is one host of a ProxyJump chain: [user@]host[:port], or
// ssh://[user@]host[:port].
type jumpHost struct {
	User string
	Host string
	Port int // 0: not given
}

func (j jumpHost) String() string {
	s := j.Host
	if j.User != "" {
		s = j.User + "@" + s
	}
	if j.Port != 0 {
		s = net.JoinHostPort(s, strconv.Itoa(j.Port))
	}
	return s
}

// maxJumps bounds a ProxyJump chain, and a chain of jump hosts' own
// ProxyJumps.
const maxJumps = 8

// parseProxyJump parses ProxyJump's value: none (no jump host: nil), or
// a comma-separated chain of [user@]host[:port] or
// ssh://[user@]host[:port] (an IPv6 address in brackets).
func parseProxyJump(v string) ([]jumpHost, error) {
	v = strings.TrimSpace(v)
	if strings.EqualFold(v, "none") {
		return nil, nil
	}
	parts := strings.Split(v, ",")
	if len(parts) > maxJumps {
		return nil, fmt.Errorf("%d jump hosts, at most %d", len(parts), maxJumps)
	}
	jumps := make([]jumpHost, 0, len(parts))
	for _, p := range parts {
		j, err := parseJumpHost(strings.TrimSpace(p))
		if err != nil {
			return nil, err
		}
		jumps = append(jumps, j)
	}
	return jumps, nil
}

func parseJumpHost(s string) (jumpHost, error) {
	var j jumpHost
	rest := strings.TrimPrefix(s, "ssh://")
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		j.User, rest = rest[:i], rest[i+1:]
		if j.User == "" {
			return j, fmt.Errorf("%q: empty user", s)
		}
	}
	host, port := rest, ""
	if strings.HasPrefix(rest, "[") {
		h, p, err := net.SplitHostPort(rest)
		if err != nil {
			if !strings.HasSuffix(rest, "]") {
				return j, fmt.Errorf("%q: %v", s, err)
			}
			h, p = strings.Trim(rest, "[]"), ""
		}
		host, port = h, p
	} else if i := strings.LastIndexByte(rest, ':'); i >= 0 {
		host, port = rest[:i], rest[i+1:]
	}
	if host == "" || strings.ContainsAny(host, " \t/@[]") {
		return j, fmt.Errorf("%q: bad host", s)
	}
	if port != "" || strings.HasSuffix(rest, ":") {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return j, fmt.Errorf("%q: bad port %q", s, port)
		}
		j.Port = n
	}
	j.Host = host
	return j, nil
}
