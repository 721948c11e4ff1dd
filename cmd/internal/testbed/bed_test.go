package testbed_test

import (
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed/roottest"
)

func TestBedThreeHosts(t *testing.T) {
	t.Parallel()
	const prefix, subnet = "gwt1", 201
	b := newBed(t, testbed.Options{
		Prefix: prefix, Hosts: 3, Subnet: subnet, DeadEnd: true,
		DataNIC: func(i int) string {
			if i == 1 {
				return "eth2"
			}
			return testbed.DefaultDataNIC
		},
	})
	hosts := b.Hosts()
	if len(hosts) != 3 {
		t.Fatalf("Hosts() = %d hosts, want 3", len(hosts))
	}
	for i, h := range hosts {
		wantNIC := map[int]string{0: "enp1s0f0", 1: "eth2", 2: "enp1s0f0"}[i]
		want := testbed.Host{
			Index: i, NS: fmt.Sprintf("gwt1h%d", i), Addr: fmt.Sprintf("198.18.201.%d", i+1),
			DataNIC: wantNIC, DeadEndNIC: "eno1", DeadEndAddr: fmt.Sprintf("198.19.201.%d", i+1),
			Veth: fmt.Sprintf("gwt1v%d", i), DeadEndVeth: fmt.Sprintf("gwt1d%d", i),
		}
		if h != want {
			t.Errorf("host %d = %+v, want %+v", i, h, want)
		}
		// What the namespace itself says.
		idx := map[string]int{}
		for _, l := range ipLines(t, "-n", h.NS, "-o", "link", "show") {
			f := strings.Fields(l)
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			idx[name], _ = strconv.Atoi(strings.TrimSuffix(f[0], ":"))
		}
		names := slices.Sorted(func(yield func(string) bool) {
			for n := range idx {
				if !yield(n) {
					return
				}
			}
		})
		if wantNames := slices.Sorted(slices.Values([]string{"lo", "eno1", wantNIC})); !slices.Equal(names, wantNames) {
			t.Errorf("host %d links %v, want %v", i, names, wantNames)
		}
		if idx["eno1"] >= idx[wantNIC] {
			t.Errorf("host %d: dead-end eno1 has ifindex %d, not below data NIC %s's %d", i, idx["eno1"], wantNIC, idx[wantNIC])
		}
		addrs := map[string]string{}
		for _, l := range ipLines(t, "-n", h.NS, "-o", "-4", "addr", "show") {
			f := strings.Fields(l) // "2: eno1    inet 198.19.201.1/24 ..."
			addrs[f[1]] = f[3]
		}
		wantAddrs := map[string]string{"lo": "127.0.0.1/8", "eno1": want.DeadEndAddr + "/24", wantNIC: want.Addr + "/24"}
		if fmt.Sprint(addrs) != fmt.Sprint(wantAddrs) {
			t.Errorf("host %d addresses %v, want %v", i, addrs, wantAddrs)
		}
	}

	const port = 7001
	startListener(t, b, 2, port)
	startListener(t, b, 1, port)
	if ok, out := dial(t, b, 0, hosts[2].Addr+":7001", 5*time.Second); !ok {
		t.Errorf("host 0 cannot reach host 2's data address: %s", out)
	}
	if ok, _ := dial(t, b, 0, hosts[2].DeadEndAddr+":7001", time.Second); ok {
		t.Errorf("host 0 reached host 2's dead-end address %s", hosts[2].DeadEndAddr)
	}
	if ok, out := dial(t, b, 0, hosts[1].Addr+":7001", 5*time.Second); !ok {
		t.Fatalf("host 0 cannot reach host 1 before SetLinkDown: %s", out)
	}
	if err := b.SetLinkDown(1); err != nil {
		t.Fatal(err)
	}
	if ok, _ := dial(t, b, 0, hosts[1].Addr+":7001", time.Second); ok {
		t.Errorf("host 0 reached host 1 after SetLinkDown(1)")
	}
	if ok, out := dial(t, b, 2, hosts[0].Addr+":7001", 5*time.Second); ok || !strings.Contains(out, "refused") {
		// Host 0 runs no listener: "refused" proves host 2 still reaches it.
		t.Errorf("host 2 -> host 0 after SetLinkDown(1): ok=%v %q, want connection refused", ok, out)
	}
	if err := b.SetLinkUp(1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "host 1 reachable after SetLinkUp", func() bool {
		ok, _ := dial(t, b, 0, hosts[1].Addr+":7001", time.Second)
		return ok
	})

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, prefix); len(left) > 0 {
		t.Errorf("after Close: %v", left)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestLeftoversRemoved: New removes its prefix's leftovers of a crashed
// run, and only those.
func TestLeftoversRemoved(t *testing.T) {
	t.Parallel()
	const prefix = "gwt2"
	roottest.RequireRoot(t)
	// Leftovers: a namespace and a root veth pair. Look-alikes that New
	// must not touch: names that merely start with the prefix.
	run := func(args ...string) {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", "gwt2h0x").Run()
		exec.Command("ip", "link", "del", "gwt2brx").Run()
		exec.Command("ip", "link", "del", "gwt2d0x").Run()
	})
	run("netns", "add", "gwt2h7")
	run("link", "add", "gwt2v7", "type", "veth", "peer", "name", "gwt2p7")
	run("link", "add", "gwt2d3", "type", "veth", "peer", "name", "gwt2q3")
	run("netns", "add", "gwt2h0x")
	run("link", "add", "gwt2brx", "type", "veth", "peer", "name", "gwt2d0x")
	b := newBed(t, testbed.Options{Prefix: prefix, Hosts: 1, Subnet: 202})
	left := leftovers(t, prefix)
	want := []string{"netns gwt2h0x", "netns gwt2h0", "link gwt2brx", "link gwt2d0x", "link gwt2br", "link gwt2v0"}
	slices.Sort(left)
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("after New: %v, want %v", left, want)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	left = leftovers(t, prefix)
	slices.Sort(left)
	if want := []string{"link gwt2brx", "link gwt2d0x", "netns gwt2h0x"}; !slices.Equal(left, want) {
		t.Errorf("after Close: %v, want only the look-alikes", left)
	}
}

func TestOptionsValidated(t *testing.T) {
	long := func(int) string { return "enp1s0f0np0abcde" } // 16 chars
	for _, tc := range []struct {
		name string
		o    testbed.Options
		want string
	}{
		{"prefix not gw", testbed.Options{Prefix: "xyz", Hosts: 1, Subnet: 200}, `prefix "xyz"`},
		{"prefix too long", testbed.Options{Prefix: "gwt123", Hosts: 1, Subnet: 200}, `prefix "gwt123"`},
		{"prefix upper case", testbed.Options{Prefix: "gwT", Hosts: 1, Subnet: 200}, `prefix "gwT"`},
		{"no hosts", testbed.Options{Prefix: "gwt0", Hosts: 0, Subnet: 200}, "0 hosts"},
		{"too many hosts", testbed.Options{Prefix: "gwt0", Hosts: 254, Subnet: 200}, "254 hosts"},
		{"subnet 0", testbed.Options{Prefix: "gwt0", Hosts: 1, Subnet: 0}, "subnet 0"},
		{"subnet 251", testbed.Options{Prefix: "gwt0", Hosts: 1, Subnet: 251}, "subnet 251"},
		{"data NIC too long", testbed.Options{Prefix: "gwt0", Hosts: 2, Subnet: 200, DataNIC: long}, `host 0: bad interface name "enp1s0f0np0abcde"`},
		{"dead-end NIC with space", testbed.Options{Prefix: "gwt0", Hosts: 2, Subnet: 200, DeadEnd: true,
			DeadEndNIC: func(i int) string { return fmt.Sprintf("eno %d", i) }}, `host 0: bad interface name "eno 0"`},
		{"data NIC lo", testbed.Options{Prefix: "gwt0", Hosts: 1, Subnet: 200, DataNIC: func(int) string { return "lo" }}, `bad interface name "lo"`},
		{"same NICs", testbed.Options{Prefix: "gwt0", Hosts: 1, Subnet: 200, DeadEnd: true,
			DeadEndNIC: func(int) string { return "enp1s0f0" }}, `both "enp1s0f0"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := testbed.New(t.Context(), tc.o)
			if err == nil {
				b.Close()
				t.Fatal("New succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

// TestSixteenHosts logs how long a 16-host bed takes to build and checks
// the last host is reachable from the first.
func TestSixteenHosts(t *testing.T) {
	t.Parallel()
	start := time.Now()
	b := newBed(t, testbed.Options{Prefix: "gwt6", Hosts: 16, Subnet: 206, DeadEnd: true})
	t.Logf("16 hosts with dead-end NICs: New took %v", time.Since(start).Round(time.Millisecond))
	startListener(t, b, 15, 7006)
	if ok, out := dial(t, b, 0, b.Hosts()[15].Addr+":7006", 5*time.Second); !ok {
		t.Errorf("host 0 cannot reach host 15: %s", out)
	}
	start = time.Now()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close took %v", time.Since(start).Round(time.Millisecond))
}
