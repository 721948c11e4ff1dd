package launcher

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/engine"
	"github.com/gangway-hpc/gangway/launcher/rankenv"
)

// Open MPI takes ranks whose hosts report the same hostname for one
// node: its shared-memory BTL (vader in Open MPI 4, sm in 5, where vader
// is an alias) then maps segments that the other host never sees, and
// the ranks crash (Segmentation fault in mca_btl_vader). Containers and
// network-namespace hosts share hostnames easily. The launcher knows
// every agent's hostname from its facts, so --mpi=openmpi warns before
// mpirun starts, unless the btl setting already leaves shared memory out.

// btlSetting is the btl value mpirun and its ranks will see: -mca btl
// (last one), else -x OMPI_MCA_btl, else the launcher's own
// OMPI_MCA_btl, which mpirun inherits; "" when none sets it.
func btlSetting(cfg cli.Config, getenv func(string) string) string {
	const key = "OMPI_MCA_btl="
	for _, kv := range slices.Backward(cfg.Env.MCA) {
		if v, ok := strings.CutPrefix(kv, key); ok {
			return v
		}
	}
	if v, ok := cfg.Env.Vars["OMPI_MCA_btl"]; ok {
		return v
	}
	return getenv("OMPI_MCA_btl")
}

// sharedMemoryOff reports whether a btl value leaves out the
// shared-memory BTL: an exclusion list (^...) naming vader or sm, or an
// inclusion list naming neither.
func sharedMemoryOff(btl string) bool {
	if btl == "" {
		return false
	}
	list, exclude := strings.CutPrefix(btl, "^")
	named := false
	for c := range strings.SplitSeq(list, ",") {
		c = strings.TrimSpace(c)
		named = named || c == "vader" || c == "sm"
	}
	return named == exclude
}

// sameHostnames returns one warning per hostname that more than one host
// reports, naming the hosts, in host order.
func sameHostnames(hosts []rankenv.Host) []string {
	var order []string
	by := map[string][]string{}
	for _, h := range hosts {
		hn := h.Facts.Hostname
		if hn == "" {
			continue
		}
		if by[hn] == nil {
			order = append(order, hn)
		}
		by[hn] = append(by[hn], h.Name)
	}
	var out []string
	for _, hn := range order {
		if names := by[hn]; len(names) > 1 {
			out = append(out, fmt.Sprintf("hosts %s report the same hostname %q: Open MPI takes their ranks for one node, "+
				"and its shared-memory transport (btl vader, sm in Open MPI 5) then crashes them (Segmentation fault in mca_btl_vader); "+
				"give the hosts distinct hostnames, or leave shared memory out with -mca btl ^vader,sm (Open MPI 4 and 5; or -x OMPI_MCA_btl=^vader,sm)",
				strings.Join(names, ", "), hn))
		}
	}
	return out
}

// openMPIFacts reaches the hosts of l for what mpirun's command line
// needs from their facts, when it needs any: without hosts and -np, the
// local host's rank count, as a job without --mpi=openmpi gets it (one
// per GPU, else per CPU: mpirun would be given one slot); with several
// hosts, a warning for each hostname several of them share, unless the
// btl setting leaves shared memory out. A host that cannot be reached
// fails here, as it would fail mpirun.
func openMPIFacts(ctx context.Context, cfg *cli.Config, d engine.Deps, l rankenv.Layout, getenv func(string) string) error {
	local := cfg.Place.Source == cli.HostsLocal
	count := local && cfg.Place.NP == 0
	names := !local && len(l.Hosts) > 1 && !sharedMemoryOff(btlSetting(*cfg, getenv))
	if !count && !names {
		return nil
	}
	c, err := engine.Dial(ctx, *cfg, d, "ompi-check-"+engine.NewJobID(), l)
	if err != nil {
		return err
	}
	defer c.Close()
	hosts := c.Hosts()
	if count && len(hosts) == 1 && hosts[0].Slots > 0 {
		cfg.Place.NP = hosts[0].Slots
	}
	if names {
		for _, w := range sameHostnames(hosts) {
			fmt.Fprintf(d.Stderr, "launcher: warning: %s\n", w)
		}
	}
	return nil
}
