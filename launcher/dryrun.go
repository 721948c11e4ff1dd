package launcher

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"

	"gangway/launcher/cli"
	"gangway/launcher/rankenv"
)

// dryRun prints the placement table and every rank's environment without
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
func dryRun(ctx context.Context, w io.Writer, cfg cli.Config) error {
	l, err := rankenv.Plan(cfg.Place)
	if err == nil {
		// No facts without dialling: the local host has a slot per CPU,
		// and every host one socket (the header says so).
		l, err = l.Assumed(runtime.NumCPU())
	}
	if err != nil {
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
	rankenv.WritePlacement(w, cfg, names, l.Ranks)
	for _, r := range l.Ranks {
		if err := ctx.Err(); err != nil {
			return err
		}
		fmt.Fprintf(w, "# environment rank %d on %s\n", r.Rank, names[r.Host])
		for _, kv := range envs.Rank(r) {
			fmt.Fprintln(w, dryRunLine(kv))
		}
	}
	return nil
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
