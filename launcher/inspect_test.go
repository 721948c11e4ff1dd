package launcher

import (
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/rankenv"
)

func TestShownNIC(t *testing.T) {
	for _, tc := range []struct {
		name   string
		nic    wire.NIC
		chosen []string
		want   bool
	}{
		{"up with an address", wire.NIC{Name: "eth0", Up: true, Addrs: []string{"198.18.0.2/24", "fe80::1/64"}}, nil, true},
		{"loopback", wire.NIC{Name: "lo", Up: true, Addrs: []string{"127.0.0.1/8", "::1/128"}}, nil, true},
		{"down", wire.NIC{Name: "eth1", Addrs: []string{"10.0.0.1/24"}}, nil, false},
		{"IPv6 link-local only", wire.NIC{Name: "veth1", Up: true, Addrs: []string{"fe80::a/64"}}, nil, false},
		{"IPv4 link-local only", wire.NIC{Name: "eth2", Up: true, Addrs: []string{"169.254.3.1/16"}}, nil, false},
		{"no address", wire.NIC{Name: "ib0", Up: true}, nil, false},
		{"down but chosen", wire.NIC{Name: "eth1"}, []string{"eth0", "eth1"}, true},
		{"unparsable address shown", wire.NIC{Name: "x", Up: true, Addrs: []string{"what"}}, nil, true},
	} {
		if got := shownNIC(tc.nic, tc.chosen); got != tc.want {
			t.Errorf("%s: shownNIC = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestWriteInspectHidesNICs: without -v the section lists the usable NICs
// and counts the others; with -v it lists every one.
func TestWriteInspectHidesNICs(t *testing.T) {
	hosts := []InspectHost{{Host: "a", Reached: "198.18.0.2:22122", Interfaces: []string{"eth0"}, Addr: "198.18.0.2",
		Facts: wire.Facts{Hostname: "a", NICs: []wire.NIC{
			{Name: "lo", Type: "loopback", Up: true, Addrs: []string{"127.0.0.1/8"}},
			{Name: "eth0", Type: "ether", Up: true, Addrs: []string{"198.18.0.2/24", "fe80::1/64"}},
			{Name: "eth1", Type: "ether", Addrs: []string{"10.9.0.2/24"}},
			{Name: "veth7", Type: "veth", Up: true, Addrs: []string{"fe80::7/64"}},
		}}}}
	for _, tc := range []struct {
		verbose     bool
		shown, gone []string
	}{
		{false, []string{"nic   lo ", "nic   eth0 ", "nic   (2 more: down, or no address but link-local; -v lists them)"}, []string{"eth1", "veth7"}},
		{true, []string{"nic   lo ", "nic   eth0 ", "nic   eth1 ", "nic   veth7 "}, []string{"more:"}},
	} {
		var b strings.Builder
		writeInspect(&b, hosts, tc.verbose)
		out := b.String()
		for _, s := range tc.shown {
			if !strings.Contains(out, s) {
				t.Errorf("verbose %v: output lacks %q:\n%s", tc.verbose, s, out)
			}
		}
		for _, s := range tc.gone {
			if strings.Contains(out, s) {
				t.Errorf("verbose %v: output has %q:\n%s", tc.verbose, s, out)
			}
		}
	}
}

// TestWriteInspectNCCL: the NCCL variables of -x that look wrong on a
// host are listed in its section.
func TestWriteInspectNCCL(t *testing.T) {
	hosts := []InspectHost{{Host: "a", NCCL: []string{`NCCL_SOCKET_IFNAME="ib": selects no up interface with an address (up: lo, eth0)`}}}
	var b strings.Builder
	writeInspect(&b, hosts, false)
	if want := "\nwarn  NCCL_SOCKET_IFNAME=\"ib\": selects no up interface with an address (up: lo, eth0)\n"; !strings.Contains(b.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, b.String())
	}
}

// TestWriteInspectHealth: the table's HEALTH column and one health line
// per check in the host's section, the site check's output under it.
func TestWriteInspectHealth(t *testing.T) {
	hosts := []InspectHost{
		{Host: "a", Health: []wire.Check{{Name: wire.CheckGPUECC, Status: wire.CheckNotChecked, Detail: "nvidia-smi is not installed"}, {Name: wire.CheckTmpDir, Status: wire.CheckOK, Detail: "TMPDIR /tmp has 9.0 GiB free of 20.0 GiB"}}},
		{Host: "b", Health: []wire.Check{{Name: wire.CheckGPUBusy, Status: wire.CheckFail, Detail: "GPU 0 held by pid 465 python3"}, {Name: wire.CheckSite, Status: wire.CheckFail, Detail: `"x" exited with status 1`, Output: "one\ntwo\n"}}},
		{Host: "c"},
	}
	var b strings.Builder
	writeInspect(&b, hosts, false)
	out := b.String()
	for _, s := range []string{
		"HEALTH\n", "  ok (1 not checked)\n", "  FAIL gpu-busy,site\n", "  -\n",
		"health gpu-ecc     not_checked nvidia-smi is not installed\n",
		"health gpu-busy    fail        GPU 0 held by pid 465 python3\n",
		"health site        fail        \"x\" exited with status 1\n       | one\n       | two\n",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}

// TestInspectHostsNetVars: --inspect shows exactly the network variables
// the ranks get, with their source: the per-host choice for loopback
// hosts of a multi-host job, a forwarded or -x value otherwise, and says
// when a single host keeps NCCL's own choice.
func TestInspectHostsNetVars(t *testing.T) {
	lo := wire.Facts{NICs: []wire.NIC{{Name: "lo", Index: 1, Type: "loopback", Up: true, Addrs: []string{"127.0.0.1/8"}}}}
	loopHost := func(name, peer string) rankenv.Host {
		f := lo
		f.Routes = []wire.Route{{Peer: peer, Addr: peer, Iface: "lo"}}
		return rankenv.Host{Host: hostfile.Host{Name: name}, Reached: name, Facts: f}
	}
	parse := func(environ []string, args ...string) cli.Config {
		cfg, err := cli.Parse(append(args, "prog"), func(string) string { return "" }, environ)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	two := []rankenv.Host{loopHost("127.0.0.2", "127.0.0.3"), loopHost("127.0.0.3", "127.0.0.2")}
	for _, tc := range []struct {
		name  string
		cfg   cli.Config
		hosts []rankenv.Host
		want  []string // lines of host 0's text section and table row pieces
	}{
		{"two loopback hosts: the choice", parse([]string{"NCCL_SOCKET_IFNAME=eth9", "NCCL_DEBUG=INFO"}), two, []string{
			"env   NCCL_SOCKET_IFNAME==lo   # nccl\n", "env   GLOO_SOCKET_IFNAME=lo   # nccl\n", "env   NCCL_DEBUG=INFO   # forwarded\n", "  lo  "}},
		{"-x wins over the choice", parse(nil, "-x", "NCCL_SOCKET_IFNAME=^docker"), two, []string{"env   NCCL_SOCKET_IFNAME=^docker   # -x\n"}},
		{"one host: NCCL's own", parse(nil), two[:1], []string{"(NCCL default)", "env   (no NCCL_SOCKET_IFNAME: one host, NCCL's and Gloo's own choice)\n"}},
		{"one host, forwarded", parse([]string{"NCCL_SOCKET_IFNAME=eth9"}), two[:1], []string{"eth9 (forwarded)", "env   NCCL_SOCKET_IFNAME=eth9   # forwarded\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := inspectHosts(tc.cfg, tc.hosts)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			writeInspect(&b, out, false)
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, b.String())
				}
			}
		})
	}
}

// TestWriteInspectGPU: a GPU's NUMA node and CPUs, and where the node came
// from when sysfs did not know it (a VM's GPU; agent/facts TestGPUsInVM).
func TestWriteInspectGPU(t *testing.T) {
	hosts := []InspectHost{{Host: "a", Facts: wire.Facts{GPUs: []wire.GPU{
		{Index: 0, Name: "NVIDIA H100 80GB HBM3", BusID: "0000:00:06.0", NUMANode: 0, NUMAFrom: "nvidia-smi", CPUs: "0-15"},
		{Index: 1, Name: "NVIDIA A100-SXM4-80GB", BusID: "0000:07:00.0", NUMANode: 3, NUMAFrom: "sysfs", CPUs: "48-63,176-191"},
		{Index: 2, Name: "Tesla T4", BusID: "0000:08:00.0", NUMANode: -1},
	}}}}
	var b strings.Builder
	writeInspect(&b, hosts, false)
	for _, want := range []string{
		"\ngpu   0 NVIDIA H100 80GB HBM3 0000:00:06.0 numa 0 cpus 0-15 (from nvidia-smi topo -m: sysfs numa_node is -1)\n",
		"\ngpu   1 NVIDIA A100-SXM4-80GB 0000:07:00.0 numa 3 cpus 48-63,176-191\n",
		"\ngpu   2 Tesla T4 0000:08:00.0 numa unknown\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}
