//go:build linux

package facts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// The test binary doubles as the discovery helper: with helperEnv set it
// gathers facts in whatever network namespace it was started in (`ip netns
// exec` also mounts that namespace's sysfs) and prints them as JSON.
const (
	helperEnv      = "GANGWAY_FACTS_NETNS_HELPER"
	helperPeersEnv = "GANGWAY_FACTS_NETNS_PEERS"
	requireRootEnv = "GANGWAY_REQUIRE_ROOT_TESTS"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(netnsHelper())
	}
	os.Exit(m.Run())
}

func netnsHelper() int {
	var peers []string
	if p := os.Getenv(helperPeersEnv); p != "" {
		peers = strings.Split(p, ",")
	}
	f, err := Gather(context.Background(), Options{NvidiaSMI: notFoundSMI, Peers: peers})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(f); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// needRoot skips the test without root and ip(8), or fails it when
// GANGWAY_REQUIRE_ROOT_TESTS=1.
func needRoot(t *testing.T) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "needs root to create network namespaces"
	} else if _, err := exec.LookPath("ip"); err != nil {
		why = "needs ip(8) from iproute2: " + err.Error()
	}
	if why == "" {
		return
	}
	if os.Getenv(requireRootEnv) == "1" {
		t.Fatalf("%s (and %s=1)", why, requireRootEnv)
	}
	t.Skipf("%s; run as root (set %s=1 to make this a failure)", why, requireRootEnv)
}

// ipCmd runs ip(8) and fails the test with its output on error.
func ipCmd(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// ourNS matches the namespaces this test creates: gwf<pid>a and gwf<pid>b.
var ourNS = regexp.MustCompile(`^gwf([0-9]+)[ab]$`)

// removeLeftovers deletes gwf* namespaces left by earlier runs; those of a
// test process still running (a parallel run) are left alone.
func removeLeftovers(t *testing.T) {
	t.Helper()
	for line := range strings.SplitSeq(ipCmd(t, "netns", "list"), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "gwf") {
			continue
		}
		if m := ourNS.FindStringSubmatch(f[0]); m != nil {
			pid, _ := strconv.Atoi(m[1])
			if pid == os.Getpid() || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
				continue
			}
		}
		if out, err := exec.Command("ip", "netns", "del", f[0]).CombinedOutput(); err != nil {
			t.Logf("remove leftover namespace %s: %v: %s", f[0], err, out)
		}
	}
}

// TestNICsInNetns builds a host namespace with NICs named like a real
// server's, a peer namespace behind two veth pairs, and checks what
// discovery sees from inside the host namespace.
//
//	host (gwf<pid>a)                         peer (gwf<pid>b)
//	enp1s0f0 198.19.250.1/30  <-- veth -->  198.19.250.2/30
//	eno1     198.19.250.5/30  <-- veth -->  198.19.250.6/30
//	198.19.250.128/25 via 198.19.250.6
//	docker0 bridge with an address; br0 bridge enslaving vbr0 (a veth to
//	vbr1); eno2 veth (to eno2p), administratively down; eth9 veth, up but
//	without carrier (its peer eth9p is down)
func TestNICsInNetns(t *testing.T) {
	needRoot(t)
	removeLeftovers(t)
	host := fmt.Sprintf("gwf%da", os.Getpid())
	peer := fmt.Sprintf("gwf%db", os.Getpid())
	t.Cleanup(func() {
		for _, ns := range []string{host, peer} {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil &&
				!strings.Contains(string(out), "No such file") {
				t.Errorf("delete namespace %s: %v: %s", ns, err, out)
			}
		}
	})
	ipCmd(t, "netns", "add", host)
	ipCmd(t, "netns", "add", peer)
	h := func(args ...string) { t.Helper(); ipCmd(t, append([]string{"-n", host}, args...)...) }
	p := func(args ...string) { t.Helper(); ipCmd(t, append([]string{"-n", peer}, args...)...) }

	h("link", "set", "lo", "up")
	p("link", "set", "lo", "up")
	h("link", "add", "name", "gwfv0", "type", "veth", "peer", "name", "peer0", "netns", peer)
	h("link", "set", "gwfv0", "name", "enp1s0f0")
	h("link", "add", "name", "eno1", "type", "veth", "peer", "name", "peer1", "netns", peer)
	for _, l := range []struct{ hostIf, hostAddr, peerIf, peerAddr string }{
		{"enp1s0f0", "198.19.250.1/30", "peer0", "198.19.250.2/30"},
		{"eno1", "198.19.250.5/30", "peer1", "198.19.250.6/30"},
	} {
		h("addr", "add", l.hostAddr, "dev", l.hostIf)
		p("addr", "add", l.peerAddr, "dev", l.peerIf)
		h("link", "set", l.hostIf, "up")
		p("link", "set", l.peerIf, "up")
	}
	h("route", "add", "198.19.250.128/25", "via", "198.19.250.6")
	h("link", "add", "name", "docker0", "type", "bridge")
	h("addr", "add", "198.19.250.9/30", "dev", "docker0")
	h("link", "set", "docker0", "up")
	h("link", "add", "name", "br0", "type", "bridge")
	h("link", "add", "name", "vbr0", "type", "veth", "peer", "name", "vbr1")
	h("link", "set", "vbr0", "master", "br0")
	h("link", "set", "vbr1", "up")
	h("link", "set", "vbr0", "up")
	h("link", "add", "name", "eno2", "type", "veth", "peer", "name", "eno2p")
	h("link", "add", "name", "eth9", "type", "veth", "peer", "name", "eth9p")
	h("link", "set", "eth9", "up")
	waitOperUp(t, host, "enp1s0f0", "eno1", "vbr0")

	cmd := exec.CommandContext(t.Context(), "ip", "netns", "exec", host, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1",
		helperPeersEnv+"=198.19.250.2,198.19.250.6,198.19.250.130,198.19.250.64")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("discovery helper in %s: %v: %s", host, err, stderr.String())
	}
	var f wire.Facts
	if err := json.Unmarshal(out, &f); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}

	nics := map[string]wire.NIC{}
	for _, n := range f.NICs {
		nics[n.Name] = n
	}
	if len(nics) != 11 {
		t.Errorf("want 11 interfaces (lo enp1s0f0 eno1 docker0 br0 vbr0 vbr1 eno2 eno2p eth9 eth9p), got %+v", f.NICs)
	}
	for _, w := range []struct {
		name, typ string
		up        bool
		addr      string
		master    string
		speed     int
	}{
		{name: "lo", typ: "loopback", up: true, addr: "127.0.0.1/8"},
		{name: "enp1s0f0", typ: "veth", up: true, addr: "198.19.250.1/30", speed: 10000},
		{name: "eno1", typ: "veth", up: true, addr: "198.19.250.5/30", speed: 10000},
		{name: "docker0", typ: "bridge", addr: "198.19.250.9/30"},
		{name: "vbr0", typ: "veth", up: true, master: "br0"},
		{name: "eno2", typ: "veth", up: false},
		{name: "eth9", typ: "veth", up: false},
		{name: "br0", typ: "bridge"},
	} {
		n, ok := nics[w.name]
		if !ok {
			t.Errorf("%s missing", w.name)
			continue
		}
		if n.Type != w.typ || n.Master != w.master || n.Index <= 0 {
			t.Errorf("%s: type %q master %q index %d; want type %q master %q", w.name, n.Type, n.Master, n.Index, w.typ, w.master)
		}
		// Whether a bridge has carrier differs between kernels.
		if w.typ != "bridge" && n.Up != w.up {
			t.Errorf("%s: up = %v, want %v", w.name, n.Up, w.up)
		}
		if w.addr != "" && !contains(n.Addrs, w.addr) {
			t.Errorf("%s: addresses %q lack %s", w.name, n.Addrs, w.addr)
		}
		if w.speed != 0 && n.SpeedMbps != w.speed {
			t.Errorf("%s: speed %d, want %d", w.name, n.SpeedMbps, w.speed)
		}
		if w.typ == "veth" && n.MTU != 1500 {
			t.Errorf("%s: mtu %d", w.name, n.MTU)
		}
	}

	want := []wire.Route{
		{Peer: "198.19.250.2", Addr: "198.19.250.2", Iface: "enp1s0f0", Src: "198.19.250.1"},
		{Peer: "198.19.250.6", Addr: "198.19.250.6", Iface: "eno1", Src: "198.19.250.5"},
		{Peer: "198.19.250.130", Addr: "198.19.250.130", Iface: "eno1", Src: "198.19.250.5", Gateway: "198.19.250.6"},
	}
	if len(f.Routes) != 4 {
		t.Fatalf("routes %+v", f.Routes)
	}
	for i, w := range want {
		if f.Routes[i] != w {
			t.Errorf("route %d = %+v, want %+v", i, f.Routes[i], w)
		}
	}
	if r := f.Routes[3]; r.Iface != "" || !strings.Contains(r.Err, "route to 198.19.250.64") ||
		!strings.Contains(r.Err, "unreachable") {
		t.Errorf("route to an address without a route: %+v", r)
	}
}

// waitOperUp waits until the kernel's link watcher reports each link as
// operationally up (it may lag the carrier by up to a second).
func waitOperUp(t *testing.T, ns string, links ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, l := range links {
		for {
			out := ipCmd(t, "-n", ns, "-o", "link", "show", "dev", l)
			if strings.Contains(out, "state UP") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s in %s not up: %s", l, ns, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
