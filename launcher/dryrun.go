package launcher

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"gangway/hostfile"
	"gangway/launcher/cli"
	"gangway/launcher/plan"
	"gangway/nccl"
)

// DryRun prints the placement table and every rank's environment without
// touching the network. Format (stable; scripts read it):
//
//	# placement
//	# hosts: mpi-operator, VAR=PATH     (only for mpi-operator's hostfile)
//	RANK  HOST  LOCAL_RANK  LOCAL_SIZE  NODE  GPU
//	0     a     0           8           0     -
//	...
//	# environment rank 0 on a
//	KEY=VALUE (sorted)
//	...
//
// GPU is "-" because GPUs are only known from the hosts' agents; the
// host-specific values (MASTER_PORT, CUDA_VISIBLE_DEVICES, NCCL_*) that
// come from the hosts' facts are filled at launch.
func DryRun(ctx context.Context, w io.Writer, cfg cli.Config) error {
	hosts := cfg.Place.Hosts
	if cfg.Place.Source == cli.HostsLocal {
		// No facts without dialling: the local host has a slot per CPU.
		hosts = []hostfile.Host{plan.Local(runtime.NumCPU())}
	}
	if cfg.Place.PerSocket > 0 {
		// Sockets are known from the hosts' facts only: a dry run
		// assumes one per host (the header says so).
		hosts = slices.Clone(hosts) // not the caller's
		for i := range hosts {
			hosts[i].Slots = cfg.Place.PerSocket
		}
	}
	ranks, err := plan.Ranks(hosts, cfg.Place.NP, cfg.Place.PlanOptions())
	if err != nil {
		return err
	}
	hosts = plan.UsedHosts(hosts, ranks)
	he := make([]HostEnv, len(hosts))
	for i, h := range hosts {
		he[i] = HostEnv{Name: h.Name}
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	defer bw.Flush()
	w = bw
	envs := newEnvBuilder(ranks, he, JobEnv{JobID: "dry-run", MasterAddr: cmp.Or(cfg.Env.MasterAddr, hosts[ranks[0].Host].Name), MasterPort: cmp.Or(cfg.Env.MasterPort, 29500), Vars: cfg.Env.Vars, MCA: cfg.Env.MCA,
		RunID: cmp.Or(cfg.Control.RunID, "dry-run"), MaxRestarts: cfg.Control.MaxRestarts, TFPort: cfg.Env.TFPort})
	names := make([]string, len(hosts))
	for i, h := range hosts {
		names[i] = h.Name
	}
	writePlacement(w, cfg, names, ranks)
	for _, r := range ranks {
		if err := ctx.Err(); err != nil {
			return err
		}
		fmt.Fprintf(w, "# environment rank %d on %s\n", r.Rank, hosts[r.Host].Name)
		for _, kv := range envs.rank(r) {
			fmt.Fprintln(w, dryRunLine(kv))
		}
	}
	return nil
}

// writePlacement writes the placement table of --dry-run and
// --display-map: a header line, then one row per rank. GPU is "-" when
// the ranks' GPUs are not known (a dry run).
func writePlacement(w io.Writer, cfg cli.Config, hosts []string, ranks []plan.Rank) {
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
	if b := cfg.Place.BindSpec(); b != "none" {
		how += ", bind " + b
	}
	fmt.Fprintf(w, "# placement: %d ranks on %d hosts (%s), command: %s\n", len(ranks), len(hosts), how, strings.Join(cfg.Argv, " "))
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

// dryRunLine is one KEY=VALUE line of --dry-run's environment: as is,
// unless the value holds a control character (a newline would split it
// into two lines a script reads as two variables), which is then written
// the way bash reads it, KEY=$'...' with \n, \t, \\, \' and \xHH.
func dryRunLine(kv string) string {
	k, v, _ := strings.Cut(kv, "=")
	if !strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return kv
	}
	var b strings.Builder
	b.WriteString(k + "=$'")
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\\', c == '\'':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteString("'")
	return b.String()
}
