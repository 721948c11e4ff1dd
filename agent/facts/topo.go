package facts

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"gangway/agent/wire"
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
// matrix. NIC rows and columns, the CPU/NUMA affinity columns and the legend
// are ignored. The matrix must be square with "X" on the diagonal, every
// other cell a known connection type (NV#, PIX, PXB, PHB, NODE, SYS, SOC),
// and symmetric.
func ParseTopo(out []byte) (*wire.Topo, error) {
	lines := strings.Split(csi().ReplaceAllString(string(out), ""), "\n")
	n, hdr := -1, 0
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
	return &wire.Topo{Link: link}, nil
}
