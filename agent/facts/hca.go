package facts

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// listHCAs lists every port of every RDMA device under
// <SysRoot>/sys/class/infiniband, sorted by device name and port. A host
// without the directory has no HCAs; unreadable files are reported and
// leave their field empty.
func listHCAs(o Options) ([]wire.HCA, error) {
	root := o.Path("sys", "class", "infiniband")
	devs, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("hca: %w", err)
	}
	var hcas []wire.HCA
	var errs []error
	for _, d := range devs {
		dir := filepath.Join(root, d.Name())
		numa := -1
		if n, err := readInt(filepath.Join(dir, "device", "numa_node")); err == nil {
			numa = n
		}
		ports, err := portNumbers(filepath.Join(dir, "ports"))
		if err != nil {
			errs = append(errs, fmt.Errorf("hca %s: %w", d.Name(), err))
			continue
		}
		for _, port := range ports {
			h, err := readPort(dir, d.Name(), port)
			if err != nil {
				errs = append(errs, err)
			}
			h.NUMANode = numa
			hcas = append(hcas, h)
		}
	}
	return hcas, errors.Join(errs...)
}

// portNumbers lists the numeric entries of a ports directory, sorted.
func portNumbers(dir string) ([]int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ports []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			ports = append(ports, n)
		}
	}
	slices.Sort(ports)
	return ports, nil
}

// readPort reads one port's state, link layer, rate and network device.
func readPort(dir, name string, port int) (wire.HCA, error) {
	h := wire.HCA{Name: name, Port: port}
	pdir := filepath.Join(dir, "ports", strconv.Itoa(port))
	var errs []error
	read := func(file string) string {
		b, err := os.ReadFile(filepath.Join(pdir, file))
		if err != nil {
			errs = append(errs, fmt.Errorf("hca %s port %d: %w", name, port, err))
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	h.State = portState(read("state"))
	h.LinkLayer = read("link_layer")
	if rate := read("rate"); rate != "" {
		g, err := parseRate(rate)
		if err != nil {
			errs = append(errs, fmt.Errorf("hca %s port %d: %s: %w", name, port, filepath.Join(pdir, "rate"), err))
		}
		h.RateGbps = g
	}
	h.Netdev = portNetdev(dir, pdir, port)
	return h, errors.Join(errs...)
}

// portState turns "4: ACTIVE" into "ACTIVE".
func portState(s string) string {
	if _, after, ok := strings.Cut(s, ":"); ok {
		return strings.TrimSpace(after)
	}
	return s
}

// parseRate reads the Gb/s figure of "100 Gb/sec (4X EDR)".
func parseRate(s string) (float64, error) {
	num, _, _ := strings.Cut(s, " ")
	g, err := strconv.ParseFloat(num, 64)
	if err != nil || g < 0 {
		return 0, fmt.Errorf("bad rate %q", s)
	}
	return g, nil
}

// portNetdev finds the network device of an HCA port: the RoCE GID table's
// ndevs/0 when present, else the device's net/ directory (one netdev, or
// the one whose dev_port is port-1).
func portNetdev(dir, pdir string, port int) string {
	if b, err := os.ReadFile(filepath.Join(pdir, "gid_attrs", "ndevs", "0")); err == nil {
		if s := strings.TrimSpace(string(b)); s != "" {
			return s
		}
	}
	ents, err := os.ReadDir(filepath.Join(dir, "device", "net"))
	if err != nil || len(ents) == 0 {
		return ""
	}
	if len(ents) == 1 {
		return ents[0].Name()
	}
	for _, e := range ents {
		n, err := readInt(filepath.Join(dir, "device", "net", e.Name(), "dev_port"))
		if err == nil && n == port-1 {
			return e.Name()
		}
	}
	return ""
}
