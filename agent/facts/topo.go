package facts

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// The patterns are compiled at first use, not at package init: every
// start of the agent's binary (a job's supervisor among them) would pay
// for them, and only GPU hosts use them.
var (
	// csi matches ANSI escape sequences (newer nvidia-smi underlines the
	// header when it thinks it writes to a terminal).
	csi = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile("\x1b\\[[0-9;]*[A-Za-z]") })
	// gpuLabel matches a GPU row or column label.
	gpuLabel = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^GPU([0-9]+)$`) })
	// nvLink matches NV# (a bonded set of # NVLinks).
	nvLink = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^NV[1-9][0-9]*$`) })
)

// linkKinds are the connection types `nvidia-smi topo -m` prints besides
// NV#; SOC is the pre-2017 name of SYS.
var linkKinds = map[string]bool{"SYS": true, "SOC": true, "NODE": true, "PHB": true, "PXB": true, "PIX": true}

// ParseTopo parses the output of `nvidia-smi topo -m` into the GPU x GPU
// matrix and each GPU's CPU Affinity and NUMA Affinity columns (where the
// header has them). NIC rows and columns, the GPU NUMA ID column and the
// legend are ignored. The matrix must be square with "X" on the diagonal,
// every other cell a known connection type (NV#, PIX, PXB, PHB, NODE, SYS,
// SOC), and symmetric; an affinity is a CPU list ("0-55,112-167") or a
// node number, or N/A (unknown).
func ParseTopo(out []byte) (*wire.Topo, error) {
	lines := strings.Split(csi().ReplaceAllString(string(out), ""), "\n")
	n, hdr := -1, 0
	var cols affinityCols
	for i, line := range lines {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "GPU0" {
			continue
		}
		if len(f) > 1 && f[1] == "X" {
			return nil, fmt.Errorf("topo:%d: GPU row before the header", i+1)
		}
		n = 0
		for _, c := range f {
			m := gpuLabel().FindStringSubmatch(c)
			if m == nil {
				break
			}
			if m[1] != strconv.Itoa(n) {
				return nil, fmt.Errorf("topo:%d: header column %q, want GPU%d", i+1, c, n)
			}
			n++
		}
		cols = affinityColumns(f[n:])
		hdr = i
		break
	}
	if n < 0 {
		return nil, errors.New("topo: no header line starting with GPU0")
	}
	if n > 256 {
		return nil, fmt.Errorf("topo:%d: %d GPUs, at most 256", hdr+1, n)
	}
	link := make([][]string, 0, n)
	topo := &wire.Topo{CPUs: make([]string, n), NUMA: make([]int, n)}
	for i := hdr + 1; i < len(lines) && len(link) < n; i++ {
		f := strings.Fields(lines[i])
		if len(f) == 0 {
			continue
		}
		r := len(link)
		if f[0] != "GPU"+strconv.Itoa(r) {
			return nil, fmt.Errorf("topo:%d: row %q, want GPU%d", i+1, f[0], r)
		}
		if len(f) < n+1 {
			return nil, fmt.Errorf("topo:%d: GPU%d has %d GPU columns, want %d", i+1, r, len(f)-1, n)
		}
		row := make([]string, n)
		for c, cell := range f[1 : n+1] {
			switch {
			case c == r && cell != "X":
				return nil, fmt.Errorf("topo:%d: GPU%d to itself is %q, want X", i+1, r, cell)
			case c != r && !linkKinds[cell] && !nvLink().MatchString(cell):
				return nil, fmt.Errorf("topo:%d: GPU%d to GPU%d: unknown connection %q", i+1, r, c, cell)
			}
			row[c] = cell
		}
		cpus, numa, err := cols.values(f[n+1:])
		if err != nil {
			return nil, fmt.Errorf("topo:%d: GPU%d: %w", i+1, r, err)
		}
		topo.CPUs[r], topo.NUMA[r] = cpus, numa
		link = append(link, row)
	}
	if len(link) < n {
		return nil, fmt.Errorf("topo: header names %d GPUs, found %d rows", n, len(link))
	}
	for i := range n {
		for j := range i {
			if link[i][j] != link[j][i] {
				return nil, fmt.Errorf("topo: GPU%d to GPU%d is %s but GPU%d to GPU%d is %s",
					i, j, link[i][j], j, i, link[j][i])
			}
		}
	}
	topo.Link = link
	if !cols.cpu {
		topo.CPUs = nil
	}
	if !cols.numa {
		topo.NUMA = nil
	}
	return topo, nil
}

// affinityCols says where a GPU row's affinity cells are: after the GPU
// columns come nics NIC columns, then "CPU Affinity" and "NUMA Affinity"
// when the header has them (drivers since about 2017; "GPU NUMA ID"
// since 2023 follows and is not read).
type affinityCols struct {
	nics      int
	cpu, numa bool
}

// affinityColumns reads the header's words after the GPU columns.
func affinityColumns(rest []string) affinityCols {
	for i := 0; i+1 < len(rest); i++ {
		if rest[i] == "CPU" && rest[i+1] == "Affinity" {
			numa := i+3 < len(rest) && rest[i+2] == "NUMA" && rest[i+3] == "Affinity"
			return affinityCols{nics: i, cpu: true, numa: numa}
		}
	}
	return affinityCols{}
}

// values reads a GPU row's affinities from its cells after the GPU
// columns: the CPU list ("" for N/A or no column) and the NUMA node (-1
// for N/A or no column). Blank cells vanish between fields, so a row
// that ends early has no value.
func (c affinityCols) values(cells []string) (cpus string, numa int, err error) {
	numa = -1
	if !c.cpu || len(cells) <= c.nics {
		return "", -1, nil
	}
	if v := cells[c.nics]; v != "N/A" {
		if !validCPUList(v) {
			return "", -1, fmt.Errorf("CPU affinity %q: want a CPU list such as 0-15,32-47", v)
		}
		cpus = v
	}
	if !c.numa || len(cells) <= c.nics+1 {
		return cpus, -1, nil
	}
	if v := cells[c.nics+1]; v != "N/A" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > maxNUMANode || v != strconv.Itoa(n) {
			return "", -1, fmt.Errorf("NUMA affinity %q: want a node number or N/A", v)
		}
		numa = n
	}
	return cpus, numa, nil
}

// maxNUMANode bounds a node number (Linux's MAX_NUMNODES is at most 1024).
const maxNUMANode = 1023

// validCPUList reports whether s is a Linux CPU list (countCPUList's):
// comma-separated numbers and ascending ranges ("0-55,112-167").
func validCPUList(s string) bool {
	if len(s) > 4096 {
		return false
	}
	_, err := countCPUList(s)
	return err == nil
}
