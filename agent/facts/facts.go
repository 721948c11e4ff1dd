// Package facts discovers what the launcher needs to know about a host:
// its name, CPUs and NUMA nodes, network interfaces and the routes it uses
// to reach its peers, InfiniBand/RoCE ports, NVIDIA GPUs and their
// interconnect matrix.
//
// Discovery is read-only. Every file is read under Options.SysRoot, so tests
// run against fixture trees; nvidia-smi is an injectable function. Problems
// that leave a part of the picture unknown are collected in
// wire.Facts.DiscoveryErrs instead of failing the whole report.
package facts

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// Options configures Gather. The zero value discovers the running host.
type Options struct {
	// Name is the name the host is known by (the agent's --name). Empty
	// means the hostname.
	Name string
	// SysRoot is the directory sysfs and procfs are read under ("/" when
	// empty): <SysRoot>/sys/class/infiniband, <SysRoot>/proc/driver/nvidia...
	SysRoot string
	// NvidiaSMI runs nvidia-smi with args and returns its standard output.
	// Nil means the real binary from PATH. A nil result with an error
	// matching exec.ErrNotFound means "no NVIDIA tooling", which is not a
	// discovery problem.
	NvidiaSMI func(ctx context.Context, args ...string) ([]byte, error)
	// Peers are the other hosts of the job, as names or IP literals. Gather
	// resolves each and records the route to every address in Facts.Routes.
	Peers []string
	// LookupIP resolves a peer name; nil means net.DefaultResolver.
	LookupIP func(ctx context.Context, host string) ([]net.IP, error)
	// ResolveWait is how long a peer name that does not resolve
	// (NXDOMAIN) is looked up again before Gather records it as such
	// (wire.Hello.ResolveWaitMS); 0: not again.
	ResolveWait time.Duration
	// Euid is the effective user id used for CanDropCaches; nil means
	// os.Geteuid.
	Euid func() int
}

// Path is elem joined under SysRoot: Path("proc", "sys", "vm",
// "drop_caches") is /proc/sys/vm/drop_caches on the real root.
func (o Options) Path(elem ...string) string {
	root := o.SysRoot
	if root == "" {
		root = "/"
	}
	return filepath.Join(append([]string{root}, elem...)...)
}

// Gather discovers the host's facts. It fails only when ctx ends or the
// network interfaces cannot be listed; every other problem is recorded in
// DiscoveryErrs and leaves its part empty.
func Gather(ctx context.Context, o Options) (wire.Facts, error) {
	f := wire.Facts{Version: wire.Version, NUMANodes: countNUMANodes(o)}
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}

	host, err := hostname(o)
	note(err)
	f.Hostname = host
	f.Name = o.Name
	if f.Name == "" {
		f.Name = host
	}
	f.CPUs, err = countCPUs(o)
	note(err)
	f.Sockets = countSockets(o)

	nics, problems, err := listNICs(o)
	if err != nil {
		return f, fmt.Errorf("host %s: list network interfaces: %w", f.Name, err)
	}
	f.NICs = nics
	errs = append(errs, problems...)
	f.Routes = peerRoutes(ctx, o)

	f.HCAs, err = listHCAs(o)
	note(err)

	f.GPUs, f.GPUTopo, err = listGPUs(ctx, o)
	note(err)

	f.CanDropCaches = canDropCaches(o)
	for _, e := range errs {
		f.DiscoveryErrs = append(f.DiscoveryErrs, e.Error())
	}
	if err := ctx.Err(); err != nil {
		return f, fmt.Errorf("host %s: gather facts: %w", f.Name, context.Cause(ctx))
	}
	return f, nil
}

// hostname reads <SysRoot>/proc/sys/kernel/hostname, falling back to
// os.Hostname for the real root.
func hostname(o Options) (string, error) {
	p := o.Path("proc", "sys", "kernel", "hostname")
	b, err := os.ReadFile(p)
	if err == nil {
		if h := strings.TrimSpace(string(b)); h != "" {
			return h, nil
		}
	}
	if o.SysRoot != "" && o.SysRoot != "/" {
		return "", fmt.Errorf("hostname: read %s: %w", p, err)
	}
	h, herr := os.Hostname()
	if herr != nil {
		return "", fmt.Errorf("hostname: %w", herr)
	}
	return h, nil
}

// countCPUs counts the CPUs in <SysRoot>/sys/devices/system/cpu/online
// ("0-63,128-191"); for the real root it falls back to runtime.NumCPU.
func countCPUs(o Options) (int, error) {
	p := o.Path("sys", "devices", "system", "cpu", "online")
	b, err := os.ReadFile(p)
	if err == nil {
		n, perr := countCPUList(strings.TrimSpace(string(b)))
		if perr == nil {
			return n, nil
		}
		err = perr
	}
	if o.SysRoot != "" && o.SysRoot != "/" {
		return 0, fmt.Errorf("cpu count: %s: %w", p, err)
	}
	return runtime.NumCPU(), nil
}

// countCPUList counts the CPUs of a kernel cpu list such as "0-3,8,10-11":
// numbers as the kernel writes them (no sign, no leading zero) and
// ascending ranges.
func countCPUList(s string) (int, error) {
	if s == "" {
		return 0, errors.New("empty cpu list")
	}
	n := 0
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 || lo != strconv.Itoa(a) {
			return 0, fmt.Errorf("bad cpu list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || hi != strconv.Itoa(b) {
				return 0, fmt.Errorf("bad cpu list %q", s)
			}
		}
		n += b - a + 1
	}
	return n, nil
}

// countNUMANodes counts <SysRoot>/sys/devices/system/node/node<N>; 0 means
// unknown (no NUMA information in sysfs).
func countNUMANodes(o Options) int {
	m, _ := filepath.Glob(o.Path("sys", "devices", "system", "node", "node[0-9]*"))
	n := 0
	for _, p := range m {
		if _, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(p), "node")); err == nil {
			n++
		}
	}
	return n
}

// countSockets counts the distinct physical_package_id of the CPUs in
// <SysRoot>/sys/devices/system/cpu/online; 0 means unknown.
func countSockets(o Options) int {
	b, err := os.ReadFile(o.Path("sys", "devices", "system", "cpu", "online"))
	if err != nil {
		return 0
	}
	ids := map[string]bool{}
	for part := range strings.SplitSeq(strings.TrimSpace(string(b)), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return 0
		}
		z := a
		if isRange {
			if z, err = strconv.Atoi(hi); err != nil || z < a || z-a > 1<<16 {
				return 0
			}
		}
		for c := a; c <= z; c++ {
			id, err := os.ReadFile(o.Path("sys", "devices", "system", "cpu", "cpu"+strconv.Itoa(c), "topology", "physical_package_id"))
			if err != nil {
				return 0
			}
			ids[strings.TrimSpace(string(id))] = true
		}
	}
	return len(ids)
}

// canDropCaches reports whether this process could write drop_caches: it
// runs as root and the file opens for writing. Nothing is written.
func canDropCaches(o Options) bool {
	euid := os.Geteuid
	if o.Euid != nil {
		euid = o.Euid
	}
	if euid() != 0 {
		return false
	}
	f, err := os.OpenFile(o.Path("proc", "sys", "vm", "drop_caches"), os.O_WRONLY, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// readInt reads a file holding one decimal integer.
func readInt(p string) (int, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p, err)
	}
	return n, nil
}

// nvidiaSMITimeout bounds one nvidia-smi call: a driver in a bad state
// can make it hang, and the facts answer the launcher's Hello.
var nvidiaSMITimeout = 20 * time.Second

// runNvidiaSMI is the default Options.NvidiaSMI.
func runNvidiaSMI(ctx context.Context, args ...string) ([]byte, error) {
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, nvidiaSMITimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.WaitDelay = time.Second // a child holding its pipes cannot hold us
	out, err := cmd.Output()
	if err != nil {
		// nvidia-smi prints most failures ("couldn't communicate with the
		// NVIDIA driver") on stdout.
		msg := strings.TrimSpace(string(out))
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			msg = strings.TrimSpace(msg + " " + string(ee.Stderr))
		}
		if len(msg) > 500 {
			msg = msg[:500]
		}
		return nil, fmt.Errorf("nvidia-smi %s: %w: %s", strings.Join(args, " "), err, msg)
	}
	return out, nil
}

// CachedNvidiaSMI returns an Options.NvidiaSMI that remembers each answer
// (output or error, by arguments) for ttl, so an agent serving many jobs
// does not run nvidia-smi, which takes hundreds of milliseconds on a
// large GPU server, for every launch. run nil means the real nvidia-smi.
func CachedNvidiaSMI(ttl time.Duration, run func(ctx context.Context, args ...string) ([]byte, error)) func(ctx context.Context, args ...string) ([]byte, error) {
	if run == nil {
		run = runNvidiaSMI
	}
	type entry struct {
		at  time.Time
		out []byte
		err error
	}
	var mu sync.Mutex
	cache := map[string]entry{}
	return func(ctx context.Context, args ...string) ([]byte, error) {
		key := strings.Join(args, "\x00")
		mu.Lock()
		e, ok := cache[key]
		mu.Unlock()
		if ok && time.Since(e.at) < ttl {
			return e.out, e.err
		}
		out, err := run(ctx, args...)
		if ctx.Err() == nil { // a cancelled run says nothing about the host
			mu.Lock()
			cache[key] = entry{time.Now(), out, err}
			mu.Unlock()
		}
		return out, err
	}
}
