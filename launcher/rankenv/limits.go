package rankenv

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/nccl"
)

// MaxVarLen is the longest NAME=VALUE a rank's environment may hold:
// Linux's MAX_ARG_STRLEN (32 pages) counts the terminating NUL, and
// execve fails with E2BIG on a longer string.
const MaxVarLen = 128<<10 - 1

// startSlack is what a host's start message holds besides its ranks'
// argv and environments (ids, the PMI mapping, JSON punctuation), kept
// free under wire.MaxJobControl.
const startSlack = 64 << 10

// CheckSizes refuses, before any host is reached, a variable the ranks
// would get that execve cannot pass (longer than MaxVarLen), naming it
// and where it came from: the user's -x, -genv, --env-file, or the
// launcher's environment (forwarded; -genvnone or -genvlist leave it
// home).
func CheckSizes(cfg cli.Config) error {
	check := func(k, v, src string) error {
		if n := len(k) + 1 + len(v); n > MaxVarLen {
			how := "shorten it"
			if src == SrcForwarded {
				how = "unset it, or leave it home with -genvnone or -genvlist"
			}
			return fmt.Errorf("%w: environment variable %s (%s) is %s; a process's environment takes at most %s per variable (Linux's MAX_ARG_STRLEN): %s",
				cli.ErrUsage, k, src, size(n), size(MaxVarLen), how)
		}
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.Env.Vars)) {
		if err := check(k, cfg.Env.Vars[k], cmp.Or(cfg.Env.Sources[k], cli.SrcX)); err != nil {
			return err
		}
	}
	for _, kv := range Forwarded(cfg.Env.Launcher, cfg.Env.Forward, cfg.Env.ForwardList) {
		k, v, _ := strings.Cut(kv, "=")
		if _, user := cfg.Env.Vars[k]; user {
			continue
		}
		if err := check(k, v, SrcForwarded); err != nil {
			return err
		}
	}
	return nil
}

// checkStart refuses a job whose start message to some host would be
// over the protocol's limit (wire.MaxJobControl): the shared (forwarded)
// environment once, the host's own variables once (compact form), and
// every local rank's own environment, and its argv unless the compact
// form sends argv once. The message names the host, its ranks and the
// largest variables.
func checkStart(argv []string, names []string, shared []string, starts []HostStart) error {
	sharedLen := envLen(shared)
	argvLen := 0
	for _, a := range argv {
		argvLen += jsonLen(a) + 3
	}
	for h, hs := range starts {
		n, fixed := sharedLen, sharedLen
		if hs.Compact {
			fixed += argvLen + envLen(hs.HostEnv)
			n = fixed
		}
		for _, r := range hs.Ranks {
			n += 256 + envLen(r.Env)
			if !hs.Compact {
				n += argvLen
			}
		}
		if n <= wire.MaxJobControl-startSlack {
			continue
		}
		locals := len(hs.Ranks)
		// The largest by what they add to the message: a rank's own
		// variable once per local rank, a shared one once.
		type contrib struct {
			key  string
			each int
			n    int
		}
		var cs []contrib
		for _, kv := range slices.Concat(shared, hs.HostEnv) {
			k, _, _ := strings.Cut(kv, "=")
			cs = append(cs, contrib{k, jsonLen(kv), 1})
		}
		if locals > 0 {
			for _, kv := range hs.Ranks[0].Env {
				k, _, _ := strings.Cut(kv, "=")
				cs = append(cs, contrib{k, jsonLen(kv), locals})
			}
		}
		slices.SortStableFunc(cs, func(a, b contrib) int { return b.each*b.n - a.each*a.n })
		var big []string
		for _, c := range cs[:min(3, len(cs))] {
			if c.n > 1 {
				big = append(big, fmt.Sprintf("%s (%d × %s)", c.key, c.n, size(c.each)))
			} else {
				big = append(big, fmt.Sprintf("%s (%s)", c.key, size(c.each)))
			}
		}
		return fmt.Errorf("host %s: the job's start message would be %s, over the protocol's %s limit: %s of environment every rank shares (the launcher's, -x, the job's), and %d ranks with %s of their own environment and arguments each; the largest variables: %s (shorten or drop them; -genvnone or -genvlist leave the launcher's environment home)",
			names[h], size(n), size(wire.MaxJobControl), size(fixed), locals, size((n-fixed)/max(locals, 1)), strings.Join(big, ", "))
	}
	return nil
}

// envLen is about what env takes in a JSON list.
func envLen(env []string) int {
	n := 0
	for _, kv := range env {
		n += jsonLen(kv) + 3
	}
	return n
}

// jsonLen is about what s takes in a JSON string: control characters,
// quotes, backslashes and the HTML characters Go escapes take more than
// a byte.
func jsonLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\' || c == '\n' || c == '\t' || c == '\r':
			n++
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			n += 5
		}
	}
	return n
}

func size(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// DryRunNetwork is --dry-run's "# nccl:" line: which network variables
// each host's ranks will get at launch (the values come from the hosts'
// facts), or "" when the dry run shows them all: a single-host job keeps
// NCCL's and Gloo's own choices, and --network-interface's names are
// known (DryRun sets them).
func DryRunNetwork(cfg cli.Config, hosts int) string {
	var names []string
	switch {
	case cfg.Network.Interface != "":
		names = []string{"NCCL_IB_HCA"}
	case hosts > 1:
		names = []string{"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "HOROVOD_GLOO_IFACE", "NCCL_IB_HCA"}
	default:
		return "# nccl: nothing (one host: NCCL's and Gloo's own choice; --network-interface sets one)"
	}
	names = slices.DeleteFunc(names, func(k string) bool { return userWins(cfg.Env.Vars, k) })
	if len(names) == 0 {
		return ""
	}
	return "# nccl: " + strings.Join(names, ", ") + " chosen per host at launch from its routes and active HCA ports (NCCL_IB_HCA only where some are active); -inspect shows them"
}

// forcedNet is the network environment --network-interface gives every
// host, as far as it is known without the hosts' facts (not NCCL_IB_HCA).
func forcedNet(n cli.Network) []string {
	if n.Interface == "" {
		return nil
	}
	return nccl.Env(nccl.Choice{Ifaces: n.Forced()})
}

// NetVars are the network variables (NCCL_*, GLOO_*, HOROVOD_GLOO_*) a
// rank on a host with this network choice (nil: none, a single-host job)
// gets, with their sources, sorted: what --inspect shows. The same
// Builder as a run's decides them, forwarded and -x values included.
func NetVars(cfg cli.Config, c *nccl.Choice) []Var {
	he := []hostEnv{{Name: "inspect"}}
	if c != nil {
		he[0].Net = nccl.Env(*c)
	}
	r := plan.Rank{LocalSize: 1}
	vars := newBuilder([]plan.Rank{r}, he, newJobEnv(cfg, "inspect", 0, "inspect", 0)).Vars(r)
	return slices.DeleteFunc(vars, func(v Var) bool {
		return !strings.HasPrefix(v.Key, "NCCL_") && !strings.HasPrefix(v.Key, "GLOO_") && !strings.HasPrefix(v.Key, "HOROVOD_GLOO_")
	})
}

// ReplacedWarnings words, for the launcher's warnings, the forwarded
// network variables (the launcher's own NCCL_SOCKET_IFNAME...) that a
// host's choice replaces: the launcher's choice wins over forwarded
// values, and a job that ran with the exported value on this machine
// would otherwise change silently on several hosts. choices are
// Prepare's, by host.
func ReplacedWarnings(cfg cli.Config, hosts []Host, choices []*nccl.Choice) []string {
	fwd := map[string]string{}
	for _, kv := range Forwarded(cfg.Env.Launcher, cfg.Env.Forward, cfg.Env.ForwardList) {
		k, v, _ := strings.Cut(kv, "=")
		fwd[k] = v
	}
	var out []string
	for _, k := range []string{"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "HOROVOD_GLOO_IFACE", "NCCL_IB_HCA"} {
		v, ok := fwd[k]
		if !ok || userWins(cfg.Env.Vars, k) {
			continue
		}
	hostLoop:
		for i, c := range choices {
			if c == nil {
				continue
			}
			for _, kv := range nccl.Env(*c) {
				if ck, cv, _ := strings.Cut(kv, "="); ck == k && cv != v {
					out = append(out, fmt.Sprintf("%s=%s from the launcher's environment is replaced by each host's choice (%s on %s); -x %s keeps yours", k, v, cv, hosts[i].Name, k))
					break hostLoop // one line per variable
				}
			}
		}
	}
	return out
}
