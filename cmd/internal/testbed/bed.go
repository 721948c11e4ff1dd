package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Options describes a test bed.
type Options struct {
	// Prefix names every namespace and link of the bed. It must start with
	// "gw" and be at most 5 lower-case letters or digits, e.g. "gwt3".
	// Concurrent beds must use different prefixes.
	Prefix string
	// Hosts is the number of hosts, 1 to 253.
	Hosts int
	// Subnet selects 198.18.<Subnet>.0/24 (1 to 250) for the data network
	// and, with DeadEnd, 198.19.<Subnet>.0/24 for the dead-end NICs.
	Subnet int
	// DataNIC names host i's data interface; nil means "enp1s0f0".
	DataNIC func(i int) string
	// DeadEnd gives every host a second NIC with a lower interface index
	// than the data NIC and an address that reaches nothing.
	DeadEnd bool
	// DeadEndNIC names host i's dead-end interface; nil means "eno1".
	DeadEndNIC func(i int) string
	// Logf, if set, receives progress messages (tests pass t.Logf).
	Logf func(format string, args ...any)
}

// Host is one namespace host of a bed.
type Host struct {
	Index   int
	NS      string // network namespace, e.g. "gwt3h0"
	Addr    string // data address, 198.18.<Subnet>.<Index+1>
	DataNIC string
	// DeadEndNIC and DeadEndAddr are empty without Options.DeadEnd.
	DeadEndNIC  string
	DeadEndAddr string // 198.19.<Subnet>.<Index+1>
	// Veth is the root-namespace end of the host's data link (a bridge port).
	Veth string
	// DeadEndVeth is the root-namespace end of the dead-end link: up, but
	// in no bridge and without an address. Empty without DeadEnd.
	DeadEndVeth string
}

// Bed is a built test bed. Its methods are safe for concurrent use.
type Bed struct {
	prefix  string
	subnet  int
	bridge  string
	hosts   []Host
	logf    func(format string, args ...any)
	bgCtx   context.Context // New's ctx without its cancellation, for Close
	nsRE    *regexp.Regexp
	linkRE  *regexp.Regexp
	mu      sync.Mutex
	procs   []*Proc
	closing bool
}

// Default interface names, as on a typical GPU node.
const (
	DefaultDataNIC    = "enp1s0f0"
	DefaultDeadEndNIC = "eno1"
)

var (
	prefixRE = regexp.MustCompile(`^gw[a-z0-9]{0,3}$`)
	ifnameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$`)
)

// New removes leftovers of an earlier run with the same prefix, then builds
// the bed. On failure it removes whatever it had built.
func New(ctx context.Context, o Options) (*Bed, error) {
	b, err := plan(o)
	if err != nil {
		return nil, err
	}
	b.bgCtx = context.WithoutCancel(ctx)
	if err := b.purge(ctx); err != nil {
		return nil, fmt.Errorf("testbed %s: remove leftovers: %w", b.prefix, err)
	}
	start := time.Now()
	if err := b.build(ctx); err != nil {
		if perr := b.purge(b.bgCtx); perr != nil {
			err = errors.Join(err, fmt.Errorf("remove partial bed: %w", perr))
		}
		return nil, fmt.Errorf("testbed %s: %w", b.prefix, err)
	}
	b.logf("testbed %s: %d hosts on 198.18.%d.0/24 built in %v",
		b.prefix, len(b.hosts), b.subnet, time.Since(start).Round(time.Millisecond))
	return b, nil
}

// plan validates o and computes every name and address, before any command
// runs.
func plan(o Options) (*Bed, error) {
	if !prefixRE.MatchString(o.Prefix) {
		return nil, fmt.Errorf("testbed: prefix %q must be \"gw\" and up to 3 more lower-case letters or digits", o.Prefix)
	}
	if o.Hosts < 1 || o.Hosts > 253 {
		return nil, fmt.Errorf("testbed %s: %d hosts, want 1 to 253", o.Prefix, o.Hosts)
	}
	if o.Subnet < 1 || o.Subnet > 250 {
		return nil, fmt.Errorf("testbed %s: subnet %d, want 1 to 250", o.Prefix, o.Subnet)
	}
	dataNIC, deadNIC := o.DataNIC, o.DeadEndNIC
	if dataNIC == nil {
		dataNIC = func(int) string { return DefaultDataNIC }
	}
	if deadNIC == nil {
		deadNIC = func(int) string { return DefaultDeadEndNIC }
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	p := regexp.QuoteMeta(o.Prefix)
	b := &Bed{
		prefix: o.Prefix,
		subnet: o.Subnet,
		bridge: o.Prefix + "br",
		logf:   logf,
		nsRE:   regexp.MustCompile(`^` + p + `h[0-9]+$`),
		linkRE: regexp.MustCompile(`^` + p + `(br|[vd][0-9]+)$`),
	}
	for i := range o.Hosts {
		h := Host{
			Index:   i,
			NS:      fmt.Sprintf("%sh%d", o.Prefix, i),
			Addr:    fmt.Sprintf("198.18.%d.%d", o.Subnet, i+1),
			DataNIC: dataNIC(i),
			Veth:    fmt.Sprintf("%sv%d", o.Prefix, i),
		}
		names := []string{h.DataNIC}
		if o.DeadEnd {
			h.DeadEndNIC = deadNIC(i)
			h.DeadEndAddr = fmt.Sprintf("198.19.%d.%d", o.Subnet, i+1)
			h.DeadEndVeth = fmt.Sprintf("%sd%d", o.Prefix, i)
			names = append(names, h.DeadEndNIC)
		}
		for _, n := range names {
			if !ifnameRE.MatchString(n) || n == "lo" {
				return nil, fmt.Errorf("testbed %s: host %d: bad interface name %q (want at most 15 of [A-Za-z0-9_.-], not \"lo\")", o.Prefix, i, n)
			}
		}
		if h.DataNIC == h.DeadEndNIC {
			return nil, fmt.Errorf("testbed %s: host %d: data and dead-end NIC are both %q", o.Prefix, i, h.DataNIC)
		}
		b.hosts = append(b.hosts, h)
	}
	return b, nil
}

// build creates the bed in two steps: one root-namespace batch (namespaces,
// bridge, veth pairs whose peers are created directly inside the
// namespaces, dead-end pair first so its NIC gets the lower index), then
// one batch per namespace for addresses and links up.
func (b *Bed) build(ctx context.Context) error {
	if err := runBatch(ctx, "", b.rootScript()); err != nil {
		return err
	}
	for _, h := range b.hosts {
		if err := runBatch(ctx, h.NS, hostScript(h, b.subnet)); err != nil {
			return fmt.Errorf("host %d: %w", h.Index, err)
		}
	}
	return nil
}

func (b *Bed) rootScript() string {
	var s strings.Builder
	for _, h := range b.hosts {
		fmt.Fprintf(&s, "netns add %s\n", h.NS)
	}
	fmt.Fprintf(&s, "link add %s type bridge\n", b.bridge)
	fmt.Fprintf(&s, "addr add 198.18.%d.254/24 dev %s\n", b.subnet, b.bridge)
	fmt.Fprintf(&s, "link set %s up\n", b.bridge)
	for _, h := range b.hosts {
		if h.DeadEndNIC != "" {
			fmt.Fprintf(&s, "link add %s type veth peer name %s netns %s\n", h.DeadEndVeth, h.DeadEndNIC, h.NS)
			fmt.Fprintf(&s, "link set %s up\n", h.DeadEndVeth)
		}
		fmt.Fprintf(&s, "link add %s type veth peer name %s netns %s\n", h.Veth, h.DataNIC, h.NS)
		fmt.Fprintf(&s, "link set %s master %s up\n", h.Veth, b.bridge)
	}
	return s.String()
}

func hostScript(h Host, subnet int) string {
	var s strings.Builder
	s.WriteString("link set lo up\n")
	if h.DeadEndNIC != "" {
		fmt.Fprintf(&s, "addr add %s/24 dev %s\n", h.DeadEndAddr, h.DeadEndNIC)
		fmt.Fprintf(&s, "link set %s up\n", h.DeadEndNIC)
	}
	fmt.Fprintf(&s, "addr add %s/24 dev %s\n", h.Addr, h.DataNIC)
	fmt.Fprintf(&s, "link set %s up\n", h.DataNIC)
	return s.String()
}

// Hosts returns the bed's hosts, in index order.
func (b *Bed) Hosts() []Host {
	return append([]Host(nil), b.hosts...)
}

// Prefix returns the bed's name prefix.
func (b *Bed) Prefix() string { return b.prefix }

// Bridge returns the root-namespace bridge, which holds 198.18.<Subnet>.254.
func (b *Bed) Bridge() string { return b.bridge }

func (b *Bed) host(i int) (Host, error) {
	if i < 0 || i >= len(b.hosts) {
		return Host{}, fmt.Errorf("testbed %s: no host %d (bed has %d)", b.prefix, i, len(b.hosts))
	}
	return b.hosts[i], nil
}

// SetLinkDown sets host i's data link down on the root side (its bridge
// port), like a pulled cable: the host keeps its address and sees
// NO-CARRIER, and nothing reaches it over the data network.
func (b *Bed) SetLinkDown(i int) error { return b.setLink(i, "down") }

// SetLinkUp undoes SetLinkDown.
func (b *Bed) SetLinkUp(i int) error { return b.setLink(i, "up") }

func (b *Bed) setLink(i int, state string) error {
	h, err := b.host(i)
	if err != nil {
		return err
	}
	if _, err := runIP(b.bgCtx, "link", "set", h.Veth, state); err != nil {
		return fmt.Errorf("testbed %s: host %d: %w", b.prefix, i, err)
	}
	return nil
}

// Close stops every tracked process, removes every namespace and link of
// the bed, and checks that none is left, naming leftovers in its error. It
// is idempotent; later calls redo the removal and the check.
func (b *Bed) Close() error {
	b.mu.Lock()
	procs := b.procs
	b.procs = nil
	b.closing = true
	b.mu.Unlock()

	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() {
			if err := p.Stop(closeGrace); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := b.purge(b.bgCtx); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("testbed %s: close: %w", b.prefix, err)
	}
	return nil
}

// closeGrace is the SIGTERM-to-SIGKILL grace Close gives tracked processes.
const closeGrace = 3 * time.Second

// purge removes every namespace and link matching the bed's prefix, after
// killing processes still inside those namespaces (untracked ones, such as
// OpenSSH sessions, or survivors of a crashed run), then verifies that
// nothing matching is left.
func (b *Bed) purge(ctx context.Context) error {
	nss, links, err := b.leftovers(ctx)
	if err != nil {
		return err
	}
	if len(nss) == 0 && len(links) == 0 {
		return nil
	}
	b.logf("testbed %s: removing namespaces %v and links %v", b.prefix, nss, links)
	for _, ns := range nss {
		b.killNamespacePids(ctx, ns)
	}
	var s strings.Builder
	// Root-side veths first: deleting one deletes its peer at once, while a
	// namespace's own devices go away asynchronously (or never, while a
	// process keeps the namespace alive).
	for _, l := range links {
		if l != b.bridge {
			fmt.Fprintf(&s, "link del %s\n", l)
		}
	}
	for _, l := range links {
		if l == b.bridge {
			fmt.Fprintf(&s, "link del %s\n", l)
		}
	}
	for _, ns := range nss {
		fmt.Fprintf(&s, "netns del %s\n", ns)
	}
	batchErr := runBatch(ctx, "", s.String())
	// Check even when a command failed: another delete may have removed it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		nss, links, err = b.leftovers(ctx)
		if err != nil {
			return errors.Join(batchErr, err)
		}
		if len(nss) == 0 && len(links) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(batchErr, fmt.Errorf("left behind: namespaces %v, links %v", nss, links))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leftovers lists the namespaces and root-namespace links that match the
// bed's prefix exactly.
func (b *Bed) leftovers(ctx context.Context) (nss, links []string, err error) {
	all, err := listNetns(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, n := range all {
		if b.nsRE.MatchString(n) {
			nss = append(nss, n)
		}
	}
	ls, err := listLinks(ctx, "")
	if err != nil {
		return nil, nil, err
	}
	for _, l := range ls {
		if b.linkRE.MatchString(l.Name) {
			links = append(links, l.Name)
		}
	}
	return nss, links, nil
}

// killNamespacePids SIGKILLs, by PID, every process left in namespace ns
// (one of ours by its prefix). Errors are logged: the namespace is removed
// regardless, and the check that follows reports what matters.
func (b *Bed) killNamespacePids(ctx context.Context, ns string) {
	out, err := runIP(ctx, "netns", "pids", ns)
	if err != nil {
		b.logf("testbed %s: %v", b.prefix, err)
		return
	}
	for _, f := range strings.Fields(out) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err != nil || pid <= 1 || pid == os.Getpid() {
			continue
		}
		b.logf("testbed %s: killing pid %d (%s), left in namespace %s", b.prefix, pid, procComm(pid), ns)
		if err := killPid(pid); err != nil {
			b.logf("testbed %s: kill pid %d: %v", b.prefix, pid, err)
		}
	}
}

// Usable reports why network-namespace beds cannot be built here: not
// root, no `ip`, or `ip netns` not working. The bench binary calls it for a
// clear message; tests call roottest.RequireRoot.
func Usable() error {
	if uid := os.Geteuid(); uid != 0 {
		return fmt.Errorf("running as uid %d, not root", uid)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("iproute2 `ip` not found: %w", err)
	}
	if out, err := exec.Command("ip", "netns", "list").CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns list: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
