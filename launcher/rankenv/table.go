package rankenv

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gangway-hpc/gangway/internal/textx"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/nccl"
)

// PlacementSummary is where ranks run, per host: "a: 0-7; b: 8-15".
func PlacementSummary(hosts []string, ranks []plan.Rank) string {
	per := make([][]int, len(hosts))
	for _, r := range ranks {
		per[r.Host] = append(per[r.Host], r.Rank)
	}
	parts := make([]string, 0, len(hosts))
	for i, h := range hosts {
		if len(per[i]) > 0 {
			parts = append(parts, h+": "+plan.Ranges(per[i]))
		}
	}
	return strings.Join(parts, "; ")
}

// WritePlacement writes the placement table of --dry-run and
// --display-map: a header line, then one row per rank. GPU is "-" when
// the ranks' GPUs are not known (a dry run).
func WritePlacement(w io.Writer, cfg cli.Config, hosts []string, ranks []plan.Rank) {
	how := "map-by " + cfg.Place.MapBy
	if cfg.Place.RankBy != "" {
		how += ", rank-by " + cfg.Place.RankBy
	}
	if cfg.Place.NPerNode > 0 {
		how += ", " + strconv.Itoa(cfg.Place.NPerNode) + " per node"
	}
	if cfg.Place.PerSocket > 0 {
		how += ", " + strconv.Itoa(cfg.Place.PerSocket) + " per socket"
		if cfg.Mode == cli.ModeDryRun {
			how += " (sockets unknown without the hosts' facts: 1 assumed)"
		}
	}
	if f := cfg.Place.FactSlots; f != "" {
		how += ", nproc-per-node " + f
		if cfg.Mode == cli.ModeDryRun {
			how += " (GPUs unknown without the hosts' facts: 1 GPU and this machine's CPUs assumed)"
		}
	}
	if b := cfg.Place.BindSpec(); b != "none" {
		how += ", bind " + b
	}
	fmt.Fprintf(w, "# placement: %s on %s (%s), command: %s\n", textx.Count(len(ranks), "rank"), textx.Count(len(hosts), "host"), how, strings.Join(cfg.Argv, " "))
	if cfg.Place.Source == cli.HostsMPIOperator {
		fmt.Fprintf(w, "# hosts: %s, %s=%s", cfg.Place.Source, cfg.Place.HostfileVar, cfg.Place.Hostfile)
		if cfg.Transport.PortFrom != "" {
			fmt.Fprintf(w, ", port %d from %s", cfg.Transport.Port, cfg.Transport.PortFrom)
		}
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tHOST\tLOCAL_RANK\tLOCAL_SIZE\tNODE\tGPU")
	for _, r := range ranks {
		gpu := "-"
		if r.GPUs != nil {
			gpu = nccl.CUDAVisibleDevices(r.GPUs)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%s\n", r.Rank, hosts[r.Host], r.LocalRank, r.LocalSize, r.NodeRank, gpu)
	}
	tw.Flush()
}
