// Package hostfile turns every host-list source a launcher meets into one
// []Host: the -H flag, Open MPI / DeepSpeed / mpi-operator and MPICH
// hostfiles, PBS node files and Slurm's environment. It also writes the Open
// MPI hostfile that mpirun reads. It does no I/O beyond what it is handed and
// never logs: every problem comes back as an error naming where it is.
package hostfile

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits that keep hostile or mistyped input from exhausting memory.
const (
	// MaxSlotCount bounds slots and max_slots on one host, merged or not.
	MaxSlotCount = 1 << 20
	// MaxHosts bounds how many hosts a Slurm node list or count list may
	// expand to.
	MaxHosts = 1 << 20
	// maxNameLen is the longest host or user name accepted.
	maxNameLen = 255
)

var (
	// ErrNoHosts reports a source that names no hosts at all.
	ErrNoHosts = errors.New("no hosts")
	// ErrTooManyHosts reports an expansion beyond MaxHosts.
	ErrTooManyHosts = errors.New("too many hosts")
)

// Host is one machine and how many ranks it may take.
type Host struct {
	Name     string // DNS name, alias or IP literal (IPv6 without brackets)
	User     string // SSH user; empty means the default
	Port     int    // SSH port; 0 means the default
	Slots    int    // ranks placed here before oversubscribing
	MaxSlots int    // hard cap on ranks; 0 means unlimited
}

// String renders h as a -H entry, [user@]name[:slots], bracketing IPv6
// literals. A non-zero Port is appended as a third field (name:slots:port,
// or name::port with Slots unset) so ParseList reads the text back as h.
func (h Host) String() string {
	var b strings.Builder
	if h.User != "" {
		b.WriteString(h.User)
		b.WriteByte('@')
	}
	if strings.Contains(h.Name, ":") {
		b.WriteByte('[')
		b.WriteString(h.Name)
		b.WriteByte(']')
	} else {
		b.WriteString(h.Name)
	}
	if h.Slots != 0 || h.Port != 0 {
		b.WriteByte(':')
		if h.Slots != 0 {
			b.WriteString(strconv.Itoa(h.Slots))
		}
	}
	if h.Port != 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(h.Port))
	}
	return b.String()
}

// Validate reports whether h could have come out of this package's parsers:
// a valid name and user, 1 ≤ Slots ≤ MaxSlotCount, MaxSlots 0 or between
// Slots and MaxSlotCount, and Port 0 or 1..65535.
func (h Host) Validate() error {
	if err := validName(h.Name); err != nil {
		return err
	}
	if h.User != "" {
		if err := validUser(h.User); err != nil {
			return err
		}
	}
	if h.Slots < 1 || h.Slots > MaxSlotCount {
		return fmt.Errorf("host %q: slots %d must be 1 to %d", h.Name, h.Slots, MaxSlotCount)
	}
	if h.MaxSlots != 0 && (h.MaxSlots < h.Slots || h.MaxSlots > MaxSlotCount) {
		return fmt.Errorf("host %q: max_slots %d must be %d to %d", h.Name, h.MaxSlots, h.Slots, MaxSlotCount)
	}
	if h.Port < 0 || h.Port > 65535 {
		return fmt.Errorf("host %q: port %d must be 1 to 65535", h.Name, h.Port)
	}
	return nil
}

// each is h once per name, in order.
func (h Host) each(names []string) []Host {
	out := make([]Host, len(names))
	for i, n := range names {
		out[i] = h
		out[i].Name = n
	}
	return out
}

// TotalSlots sums Slots over hosts.
func TotalSlots(hosts []Host) int {
	n := 0
	for _, h := range hosts {
		n += h.Slots
	}
	return n
}

// Format writes hosts as an Open MPI hostfile, one line per host in the
// given order: "[user@]host slots=N[ max_slots=M][ port=P]\n". Every host is
// validated first, so on error nothing is written.
func Format(w io.Writer, hosts []Host) error {
	if len(hosts) == 0 {
		return fmt.Errorf("format hostfile: %w", ErrNoHosts)
	}
	var b strings.Builder
	for i, h := range hosts {
		if err := h.Validate(); err != nil {
			return fmt.Errorf("format hostfile: host %d: %w", i+1, err)
		}
		if h.User != "" {
			b.WriteString(h.User)
			b.WriteByte('@')
		}
		b.WriteString(h.Name)
		b.WriteString(" slots=")
		b.WriteString(strconv.Itoa(h.Slots))
		if h.MaxSlots != 0 {
			b.WriteString(" max_slots=")
			b.WriteString(strconv.Itoa(h.MaxSlots))
		}
		if h.Port != 0 {
			b.WriteString(" port=")
			b.WriteString(strconv.Itoa(h.Port))
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ParseError is a hostfile syntax or validation error at one line.
type ParseError struct {
	File string // the name given to Parse, or the path given to ParseFile
	Line int    // 1-based
	Msg  string
}

func (e *ParseError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

// ListError is an error in one entry of a -H host list.
type ListError struct {
	Entry int    // 1-based position in the comma-separated list
	Text  string // the entry as given
	Msg   string
}

func (e *ListError) Error() string {
	return fmt.Sprintf("-H entry %d %q: %s", e.Entry, e.Text, e.Msg)
}

// validName accepts a host name: non-empty, at most maxNameLen bytes, valid
// UTF-8, no white space, control or format characters, none of the
// separators this package's formats use (",@#=[]"), ":" only in an IP
// literal, and no leading "-" (ssh would read it as an option).
func validName(name string) error {
	if name == "" {
		return errors.New("empty host name")
	}
	if err := checkChars(name, ",@#=[]"); err != nil {
		return fmt.Errorf("bad host name %q: %w", name, err)
	}
	if strings.Contains(name, ":") && !isIP(name) {
		return fmt.Errorf("bad host name %q: contains \":\" but is not an IP address", name)
	}
	return nil
}

// validUser accepts an SSH user name under the same rules as validName,
// with ":" never allowed.
func validUser(user string) error {
	if err := checkChars(user, ",@#=[]:"); err != nil {
		return fmt.Errorf("bad user %q: %w", user, err)
	}
	return nil
}

func checkChars(s, forbidden string) error {
	switch {
	case len(s) > maxNameLen:
		return fmt.Errorf("longer than %d bytes", maxNameLen)
	case !utf8.ValidString(s):
		return errors.New("invalid UTF-8")
	case s[0] == '-':
		return errors.New(`starts with "-"`)
	}
	for _, r := range s {
		// Format characters (a byte order mark, zero-width spaces) are
		// invisible: a hostfile that starts with a stray BOM read its
		// second one as a host name.
		if unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || strings.ContainsRune(forbidden, r) {
			return fmt.Errorf("contains %q", r)
		}
	}
	return nil
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// parseNum parses a decimal field of ASCII digits in lo..hi. Signs, spaces
// and other notations are rejected.
func parseNum(what, s string, lo, hi int) (int, error) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("bad %s %q", what, s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("bad %s %q: must be %d to %d", what, s, lo, hi)
	}
	return n, nil
}

// hostKey identifies a host for merging: the same machine reached the same
// way.
type hostKey struct {
	user, name string
	port       int
}

// Merge merges the hosts of several sources (-H lists, hostfiles), each
// already parsed, in order of first appearance, by the rules every
// source merges its own repeats by (merger): a repeat's slots add to the
// first occurrence's, caps add unless one occurrence has none. Like a
// parse it fails past MaxHosts hosts given in all; the merged slots are
// not checked here (Validate each host: its error names the total).
func Merge(sources ...[]Host) ([]Host, error) {
	m := merger{sumsUnchecked: true}
	for _, hosts := range sources {
		if err := m.addAll(hosts); err != nil {
			return nil, err
		}
	}
	return m.hosts, nil
}

// merger collects hosts in order of first appearance, adding the slots of
// repeats (mpirun's -H a,a,b = a:2,b:1). Merged MaxSlots is the sum
// (capped at MaxSlotCount) when every occurrence has a cap, and unlimited (0)
// once any has none.
type merger struct {
	hosts []Host
	index map[hostKey]int
	added int // hosts given to add, repeats and range expansions included
	// sumsUnchecked: a repeat may take a host past MaxSlotCount (Merge's
	// caller validates the merged hosts).
	sumsUnchecked bool
}

// addAll merges hosts in, in order, making room for them first.
func (m *merger) addAll(hosts []Host) error {
	if m.index == nil {
		m.index = make(map[hostKey]int, len(hosts))
	}
	if len(hosts) > 1 {
		m.hosts = slices.Grow(m.hosts, len(hosts))
	}
	for _, h := range hosts {
		if err := m.add(h); err != nil {
			return err
		}
	}
	return nil
}

// add merges h in; past MaxHosts hosts given in all (ranges expanded) it
// fails with ErrTooManyHosts, so repeated large ranges cannot take
// unbounded time.
func (m *merger) add(h Host) error {
	if m.added++; m.added > MaxHosts {
		return fmt.Errorf("%w: more than %d in all", ErrTooManyHosts, MaxHosts)
	}
	k := hostKey{h.User, h.Name, h.Port}
	i, ok := m.index[k]
	if !ok {
		if m.index == nil {
			m.index = make(map[hostKey]int)
		}
		m.index[k] = len(m.hosts)
		m.hosts = append(m.hosts, h)
		return nil
	}
	old := &m.hosts[i]
	if !m.sumsUnchecked && old.Slots+h.Slots > MaxSlotCount {
		return fmt.Errorf("host %q: more than %d slots in all", h.Name, MaxSlotCount)
	}
	old.Slots += h.Slots
	if old.MaxSlots == 0 || h.MaxSlots == 0 {
		old.MaxSlots = 0
	} else {
		old.MaxSlots = min(old.MaxSlots+h.MaxSlots, MaxSlotCount)
	}
	return nil
}
