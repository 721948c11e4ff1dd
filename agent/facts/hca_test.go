package facts

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/agent/wire"
)

func TestListHCAs(t *testing.T) {
	hcas, err := listHCAs(Options{SysRoot: "testdata/sysroot"})
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.HCA{
		{Name: "mlx5_0", Port: 1, State: "ACTIVE", LinkLayer: "InfiniBand", RateGbps: 200, Netdev: "ib0", NUMANode: 3},
		{Name: "mlx5_1", Port: 1, State: "DOWN", LinkLayer: "Ethernet", RateGbps: 40, Netdev: "enp12s0f1np1", NUMANode: 1},
	}
	if !reflect.DeepEqual(hcas, want) {
		t.Errorf("got  %+v\nwant %+v", hcas, want)
	}
}

// write creates files under root from a path -> content table.
func write(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestListHCAsEdges(t *testing.T) {
	if hcas, err := listHCAs(Options{SysRoot: t.TempDir()}); hcas != nil || err != nil {
		t.Errorf("no infiniband dir: got %v, %v", hcas, err)
	}

	root := t.TempDir()
	ib := "sys/class/infiniband/"
	write(t, root, map[string]string{
		// Two ports; netdevs told apart by dev_port; no numa_node.
		ib + "mlx4_0/ports/1/state":               "4: ACTIVE\n",
		ib + "mlx4_0/ports/1/link_layer":          "InfiniBand\n",
		ib + "mlx4_0/ports/1/rate":                "2.5 Gb/sec (1X SDR)\n",
		ib + "mlx4_0/ports/2/state":               "2: INIT\n",
		ib + "mlx4_0/ports/2/link_layer":          "InfiniBand\n",
		ib + "mlx4_0/ports/2/rate":                "fast\n",
		ib + "mlx4_0/device/net/ib0/dev_port":     "0\n",
		ib + "mlx4_0/device/net/ib1/dev_port":     "1\n",
		ib + "mlx4_0/ports/10/state":              "4: ACTIVE\n",
		ib + "mlx4_0/ports/10/link_layer":         "InfiniBand\n",
		ib + "mlx4_0/ports/notaport/state":        "junk\n",
		ib + "mlx5_9/device/numa_node":            "-1\n",
		ib + "mlx5_9/ports/1/state":               "1: DOWN\n",
		ib + "mlx5_9/ports/1/link_layer":          "Ethernet\n",
		ib + "mlx5_9/ports/1/gid_attrs/ndevs/0":   "\n",
		ib + "mlx5_9/device/net/eth4/dev_port":    "0\n",
		ib + "mlx5_9/ports/1/gid_attrs/ndevs/255": "eth4\n",
	})
	hcas, err := listHCAs(Options{SysRoot: root})
	want := []wire.HCA{
		{Name: "mlx4_0", Port: 1, State: "ACTIVE", LinkLayer: "InfiniBand", RateGbps: 2.5, Netdev: "ib0", NUMANode: -1},
		{Name: "mlx4_0", Port: 2, State: "INIT", LinkLayer: "InfiniBand", Netdev: "ib1", NUMANode: -1},
		{Name: "mlx4_0", Port: 10, State: "ACTIVE", LinkLayer: "InfiniBand", NUMANode: -1},
		{Name: "mlx5_9", Port: 1, State: "DOWN", LinkLayer: "Ethernet", Netdev: "eth4", NUMANode: -1},
	}
	if !reflect.DeepEqual(hcas, want) {
		t.Errorf("got  %+v\nwant %+v", hcas, want)
	}
	for _, part := range []string{`mlx4_0/ports/2/rate: bad rate "fast"`, "hca mlx4_0 port 10: open", "mlx5_9 port 1: open"} {
		if err == nil || !strings.Contains(err.Error(), part) {
			t.Errorf("err = %v, want it to mention %q", err, part)
		}
	}
}

// hgxHCAs is what an HGX H100's sysfs says of its RDMA ports
// (testdata/ib-hgx-h100): eight NDR InfiniBand ports, one per GPU, and
// a storage NIC's RoCE port that is down. launcher/health's tests judge
// the same ports.
func hgxHCAs() []wire.HCA {
	var hcas []wire.HCA
	for i := range 8 {
		hcas = append(hcas, wire.HCA{Name: "mlx5_" + string(rune('0'+i)), Port: 1, State: "ACTIVE", LinkLayer: "InfiniBand",
			RateGbps: 400, Netdev: "ibp" + string(rune('0'+i)) + "s0", NUMANode: i / 4})
	}
	return append(hcas, wire.HCA{Name: "mlx5_8", Port: 1, State: "DOWN", LinkLayer: "Ethernet", RateGbps: 10, Netdev: "enp170s0f1np1"})
}

// TestListHCAsHGX reads the HGX H100 fixture and its degraded variants:
// a port down (mlx5_5), a port trained at a lower rate (mlx5_2).
func TestListHCAsHGX(t *testing.T) {
	for _, tc := range []struct {
		root   string
		change func([]wire.HCA)
	}{
		{"testdata/ib-hgx-h100", nil},
		{"testdata/ib-hgx-h100-down", func(h []wire.HCA) { h[5].State, h[5].RateGbps = "DOWN", 10 }},
		{"testdata/ib-hgx-h100-slow", func(h []wire.HCA) { h[2].RateGbps = 200 }},
	} {
		hcas, err := listHCAs(Options{SysRoot: tc.root})
		if err != nil {
			t.Fatal(err)
		}
		want := hgxHCAs()
		if tc.change != nil {
			tc.change(want)
		}
		if !reflect.DeepEqual(hcas, want) {
			t.Errorf("%s:\ngot  %+v\nwant %+v", tc.root, hcas, want)
		}
	}
}
