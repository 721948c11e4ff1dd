package facts

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// gpuQuery are the nvidia-smi arguments that list GPUs.
var gpuQuery = []string{"--query-gpu=index,uuid,pci.bus_id,name", "--format=csv,noheader"}

// listGPUs lists NVIDIA GPUs with nvidia-smi, falling back to
// <SysRoot>/proc/driver/nvidia/gpus when nvidia-smi is missing or fails,
// then reads each GPU's NUMA node from sysfs and the interconnect matrix
// and CPU/NUMA affinities from `nvidia-smi topo -m` (its NUMA Affinity
// where sysfs says -1).
func listGPUs(ctx context.Context, o Options) ([]wire.GPU, *wire.Topo, error) {
	smi := o.NvidiaSMI
	if smi == nil {
		smi = runNvidiaSMI
	}
	var errs []error
	out, err := smi(ctx, gpuQuery...)
	missing := errors.Is(err, exec.ErrNotFound)
	var gpus []wire.GPU
	if err == nil {
		gpus, err = ParseGPUQuery(out)
	}
	if err != nil {
		if !missing {
			errs = append(errs, fmt.Errorf("gpus: %w", err))
		}
		var perr error
		gpus, perr = procGPUs(o)
		if perr != nil {
			errs = append(errs, fmt.Errorf("gpus: %w", perr))
		}
	}
	for i := range gpus {
		gpus[i].NUMANode = -1
		if gpus[i].BusID == "" {
			continue
		}
		if n, err := readInt(o.Path("sys", "bus", "pci", "devices", gpus[i].BusID, "numa_node")); err == nil && n >= 0 {
			gpus[i].NUMANode, gpus[i].NUMAFrom = n, "sysfs"
		}
	}
	if len(gpus) == 0 || missing {
		return gpus, nil, errors.Join(errs...)
	}
	out, err = smi(ctx, "topo", "-m")
	if err != nil {
		errs = append(errs, fmt.Errorf("gpu topology: %w", err))
		return gpus, nil, errors.Join(errs...)
	}
	topo, err := ParseTopo(out)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("gpu topology: nvidia-smi topo -m: %w", err))
	case len(topo.Link) != len(gpus):
		errs = append(errs, fmt.Errorf("gpu topology: nvidia-smi topo -m shows %d GPUs, the query %d",
			len(topo.Link), len(gpus)))
	default:
		applyAffinity(gpus, topo)
		return gpus, topo, errors.Join(errs...)
	}
	return gpus, nil, errors.Join(errs...)
}

// applyAffinity copies topo -m's CPU Affinity to each GPU, and its NUMA
// Affinity where sysfs gave no node: a VM's passed-through GPU sits on a
// virtual PCI bus whose numa_node is -1, while the driver knows the node.
func applyAffinity(gpus []wire.GPU, topo *wire.Topo) {
	for i := range gpus {
		x := gpus[i].Index
		if x < 0 || x >= len(topo.Link) {
			continue
		}
		if x < len(topo.CPUs) {
			gpus[i].CPUs = topo.CPUs[x]
		}
		if x < len(topo.NUMA) && topo.NUMA[x] >= 0 && gpus[i].NUMANode < 0 {
			gpus[i].NUMANode, gpus[i].NUMAFrom = topo.NUMA[x], "nvidia-smi"
		}
	}
}

// ParseGPUQuery parses the output of
// `nvidia-smi --query-gpu=index,uuid,pci.bus_id,name --format=csv,noheader`.
// Bus ids are normalised to sysfs form (NormalizeBusID).
func ParseGPUQuery(out []byte) ([]wire.GPU, error) {
	var gpus []wire.GPU
	for i, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.SplitN(line, ",", 4)
		if len(f) != 4 {
			return nil, fmt.Errorf("nvidia-smi query:%d: want 4 fields, got %d: %q", i+1, len(f), line)
		}
		for j := range f {
			f[j] = strings.TrimSpace(f[j])
		}
		idx, err := strconv.Atoi(f[0])
		if err != nil || idx < 0 {
			return nil, fmt.Errorf("nvidia-smi query:%d: bad index %q", i+1, f[0])
		}
		bus, err := NormalizeBusID(f[2])
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi query:%d: %w", i+1, err)
		}
		gpus = append(gpus, wire.GPU{Index: idx, UUID: f[1], BusID: bus, Name: f[3]})
	}
	return gpus, nil
}

// NormalizeBusID turns nvidia-smi's "00000000:07:00.0" into sysfs's
// "0000:07:00.0": lower case, the PCI domain as at least four hex digits.
func NormalizeBusID(s string) (string, error) {
	dom, rest, ok := strings.Cut(strings.ToLower(strings.TrimSpace(s)), ":")
	bad := fmt.Errorf("bad PCI bus id %q", s)
	if !ok || dom == "" || len(dom) > 8 || !isHex(dom) {
		return "", bad
	}
	bus, devfn, ok := strings.Cut(rest, ":")
	dev, fn, ok2 := strings.Cut(devfn, ".")
	if !ok || !ok2 || len(bus) != 2 || len(dev) != 2 || len(fn) != 1 || !isHex(bus+dev+fn) {
		return "", bad
	}
	dom = strings.TrimLeft(dom, "0")
	for len(dom) < 4 {
		dom = "0" + dom
	}
	return dom + ":" + rest, nil
}

func isHex(s string) bool {
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// procGPUs reads <SysRoot>/proc/driver/nvidia/gpus/*/information. GPUs are
// indexed in PCI bus order, as nvidia-smi does.
func procGPUs(o Options) ([]wire.GPU, error) {
	root := o.Path("proc", "driver", "nvidia", "gpus")
	ents, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var gpus []wire.GPU
	var errs []error
	for _, e := range ents {
		p := filepath.Join(root, e.Name(), "information")
		b, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		g, err := parseProcInformation(b)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		gpus = append(gpus, g)
	}
	slices.SortFunc(gpus, func(a, b wire.GPU) int { return strings.Compare(a.BusID, b.BusID) })
	for i := range gpus {
		gpus[i].Index = i
	}
	return gpus, errors.Join(errs...)
}

// parseProcInformation reads the Model, GPU UUID and Bus Location lines of
// a driver information file.
func parseProcInformation(b []byte) (wire.GPU, error) {
	var g wire.GPU
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "Model":
			g.Name = v
		case "GPU UUID":
			g.UUID = v
		case "Bus Location":
			bus, err := NormalizeBusID(v)
			if err != nil {
				return g, err
			}
			g.BusID = bus
		}
	}
	if g.BusID == "" {
		return g, errors.New("no Bus Location line")
	}
	return g, nil
}
