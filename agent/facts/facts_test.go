package facts

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
)

func TestGatherFixture(t *testing.T) {
	smi := fakeSMI(map[string][]byte{
		queryKey:  readFixture(t, "smi-query-dgx-a100.csv"),
		"topo -m": readFixture(t, "topo-dgx-a100.txt"),
	})
	f, err := Gather(t.Context(), Options{SysRoot: "testdata/sysroot", NvidiaSMI: smi, Euid: func() int { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != wire.Version || f.Hostname != "dgx-a100-07" || f.Name != "dgx-a100-07" {
		t.Errorf("version %d hostname %q name %q", f.Version, f.Hostname, f.Name)
	}
	if f.CPUs != 256 || f.NUMANodes != 8 {
		t.Errorf("cpus %d numa nodes %d, want 256 and 8", f.CPUs, f.NUMANodes)
	}
	if len(f.HCAs) != 2 || len(f.GPUs) != 8 || f.GPUTopo == nil {
		t.Errorf("%d HCAs, %d GPUs, topology %v", len(f.HCAs), len(f.GPUs), f.GPUTopo)
	}
	if !f.CanDropCaches {
		t.Error("CanDropCaches false for root with a writable drop_caches")
	}
	if len(f.DiscoveryErrs) != 0 {
		t.Errorf("discovery errors: %q", f.DiscoveryErrs)
	}
	lo := false
	for _, n := range f.NICs {
		lo = lo || (n.Type == "loopback" && n.Up && contains(n.Addrs, "127.0.0.1/8"))
	}
	if !lo {
		t.Errorf("no up loopback with 127.0.0.1/8 among %+v", f.NICs)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestGatherOptions(t *testing.T) {
	root := t.TempDir()
	write(t, root, map[string]string{
		"sys/devices/system/cpu/online": "0-3,8,10-11\n",
		"proc/sys/vm/drop_caches":       "0\n",
	})
	lookups := 0
	f, err := Gather(t.Context(), Options{
		Name:      "node7",
		SysRoot:   root,
		NvidiaSMI: notFoundSMI,
		Euid:      func() int { return 1000 },
		Peers:     []string{"127.0.0.1", "peer.invalid"},
		LookupIP: func(_ context.Context, host string) ([]net.IP, error) {
			lookups++
			return nil, errors.New("no such host " + host)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if f.Name != "node7" || f.CPUs != 7 || f.NUMANodes != 0 || f.CanDropCaches {
		t.Errorf("name %q cpus %d numa %d drop %v", f.Name, f.CPUs, f.NUMANodes, f.CanDropCaches)
	}
	// No hostname file under the root, no GPUs and no HCAs: only the
	// hostname is a problem.
	if len(f.DiscoveryErrs) != 1 || !strings.Contains(f.DiscoveryErrs[0], "proc/sys/kernel/hostname") {
		t.Errorf("discovery errors %q", f.DiscoveryErrs)
	}
	if lookups != 1 || len(f.Routes) != 2 {
		t.Fatalf("%d lookups, routes %+v", lookups, f.Routes)
	}
	if r := f.Routes[0]; r.Peer != "127.0.0.1" || r.Addr != "127.0.0.1" || r.Iface != "lo" || r.Err != "" {
		t.Errorf("route to loopback %+v", r)
	}
	if r := f.Routes[1]; r.Peer != "peer.invalid" || r.Iface != "" || !strings.Contains(r.Err, "no such host peer.invalid") {
		t.Errorf("route to unresolvable peer %+v", r)
	}

	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(errors.New("launcher went away"))
	if _, err := Gather(ctx, Options{SysRoot: root, NvidiaSMI: notFoundSMI}); err == nil || !strings.Contains(err.Error(), "launcher went away") {
		t.Errorf("cancelled gather: err = %v", err)
	}
}

func TestCountCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"0", 1}, {"0-63", 64}, {"0-3,8,10-11", 7}, {"0-127,128-255", 256},
		{"", -1}, {"3-1", -1}, {"a", -1}, {"0,", -1}, {"-1", -1}, {"0-", -1}, {"+1", -1}, {"0-07", -1},
	} {
		got, err := countCPUList(tc.in)
		if (err != nil) != (tc.want < 0) || (err == nil && got != tc.want) {
			t.Errorf("countCPUList(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestCachedNvidiaSMI(t *testing.T) {
	calls := 0
	run := func(ctx context.Context, args ...string) ([]byte, error) {
		calls++
		return []byte(strings.Join(args, " ")), nil
	}
	smi := CachedNvidiaSMI(time.Hour, run)
	for range 3 {
		if out, _ := smi(t.Context(), "topo", "-m"); string(out) != "topo -m" {
			t.Fatalf("got %q", out)
		}
	}
	if out, _ := smi(t.Context(), "-L"); string(out) != "-L" || calls != 2 {
		t.Fatalf("got %q after %d runs, want one run per distinct argument list", out, calls)
	}
	expired := CachedNvidiaSMI(0, run)
	expired(t.Context(), "-L")
	expired(t.Context(), "-L")
	if calls != 4 {
		t.Fatalf("%d runs, want a fresh run once the ttl has passed", calls)
	}
}

// TestCountSockets: sockets are the distinct physical_package_id of the
// online CPUs; a CPU without topology makes the count unknown (0).
func TestCountSockets(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{"sys/devices/system/cpu/online": "0-3,8\n"}
	for c, pkg := range map[string]string{"0": "0", "1": "0", "2": "1", "3": "1", "8": "3"} {
		files["sys/devices/system/cpu/cpu"+c+"/topology/physical_package_id"] = pkg + "\n"
	}
	write(t, root, files)
	if n := countSockets(Options{SysRoot: root}); n != 3 {
		t.Errorf("sockets %d, want 3", n)
	}
	write(t, root, map[string]string{"sys/devices/system/cpu/online": "0-4\n"})
	if n := countSockets(Options{SysRoot: root}); n != 0 {
		t.Errorf("cpu4 has no topology: sockets %d, want 0 (unknown)", n)
	}
	f, err := Gather(t.Context(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("this machine: %d CPUs, %d sockets", f.CPUs, f.Sockets)
	if _, err := os.Stat("/sys/devices/system/cpu/cpu0/topology/physical_package_id"); err == nil && f.Sockets < 1 {
		t.Errorf("this machine has CPU topology in sysfs but Sockets is %d", f.Sockets)
	}
}
