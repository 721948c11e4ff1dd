package launcher

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/rankenv"
)

// dryRun prints the placement table and every rank's environment without
// touching the network. Format (stable; scripts read it: lines starting
// with # are comments, the others KEY=VALUE):
//
//	# placement
//	# hosts: mpi-operator, VAR=PATH     (only for mpi-operator's hostfile)
//	RANK  HOST  LOCAL_RANK  LOCAL_SIZE  NODE  GPU
//	0     a     0           8           0     -
//	...
//	# environment rank 0 on a
//	# source: launcher
//	KEY=VALUE (sorted)
//	# source: forwarded          (one group per source, rankenv.SourceOrder)
//	...
//	# nccl: NAMES                (only where a host will get them)
//	# agent adds: NAMES
//
// GPU is "-" because GPUs are only known from the hosts' agents; the
// host-specific values (MASTER_PORT, CUDA_VISIBLE_DEVICES, NCCL_*) that
// come from the hosts' facts are filled at launch and named in the
// "# nccl:" line.
func dryRun(ctx context.Context, w io.Writer, cfg cli.Config) error {
	l, err := rankenv.Plan(cfg.Place)
	if err == nil {
		// No facts without dialling: the local host has a slot per CPU,
		// and every host one socket (the header says so).
		l, err = l.Assumed(runtime.NumCPU())
		if err != nil && cfg.Place.PerSocket > 0 {
			err = fmt.Errorf("%w (a dry run cannot know the hosts' sockets and counts one a host)", err)
		}
	}
	if err != nil {
		return err
	}
	if err := rankenv.CheckSizes(cfg); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	defer bw.Flush()
	w = bw
	envs := rankenv.DryRun(cfg, l)
	names := make([]string, len(l.Hosts))
	for i, h := range l.Hosts {
		names[i] = h.Name
	}
	nccl := rankenv.DryRunNetwork(cfg, len(l.Hosts))
	agentAdds := "# agent adds: HOME, LOGNAME, SHELL, USER (the login's, on hosts reached over SSH), TORCHELASTIC_ERROR_FILE (unless set above)"
	if cfg.Env.PMI {
		agentAdds += ", PMI_FD"
	}
	rankenv.WritePlacement(w, cfg, names, l.Ranks)
	for _, r := range l.Ranks {
		if err := ctx.Err(); err != nil {
			return err
		}
		fmt.Fprintf(w, "# environment rank %d on %s\n", r.Rank, names[r.Host])
		writeSources(w, envs.Vars(r))
		if nccl != "" {
			fmt.Fprintln(w, nccl)
		}
		fmt.Fprintln(w, agentAdds)
	}
	return nil
}

// writeSources writes a rank's variables grouped by source, in
// rankenv.SourceOrder, each group sorted (vars is sorted by name).
func writeSources(w io.Writer, vars []rankenv.Var) {
	for _, src := range rankenv.SourceOrder {
		head := false
		for _, v := range vars {
			if v.Src != src {
				continue
			}
			if !head {
				fmt.Fprintf(w, "# source: %s\n", src)
				head = true
			}
			fmt.Fprintln(w, dryRunLine(v.Key+"="+v.Value))
		}
	}
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
