package rankenv

import (
	"fmt"
	"maps"
	"slices"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/nccl"
)

// Attempt is what the pipeline made for one attempt of a job from the
// hosts' facts: every host's data network, the job's shared values and
// what every rank's environment is built from (Starts), read by the
// preflight and StartJob. It holds nothing of the facts themselves, so
// that the caller may drop them before the environments are built: at
// thousands of hosts each host's decoded facts and each rank's
// environment, held at once, were the launcher's peak heap.
type Attempt struct {
	Choices []*nccl.Choice // by host; nil: the libraries' own choice
	// Shared is what every rank gets alike (Builder.Shared: the
	// forwarded environment, the job's values, -mca, -x), sorted
	// KEY=VALUE: StartJob.Env, sent once per host.
	Shared []string
	// Addrs are, by host, its data address (DataAddr: MASTER_ADDR's
	// choice for it), where the preflight and the self-test reach it.
	Addrs []string

	argv  []string
	dir   string
	ranks []plan.Rank
	names []string // the hosts' names, for checkStart's message
	b     *Builder
}

// HostStart is one host's part of its StartJob: its ranks, and in the
// compact form (an agent whose facts say ExpandsStart) the job's command
// and directory and HostEnv, what every rank of the host gets beyond
// Shared, once (StartJob.Argv, Dir, HostEnv).
type HostStart struct {
	Compact bool
	Argv    []string
	Dir     string
	HostEnv []string
	Ranks   []wire.RankSpec
}

// Starts are, by host, what its StartJob carries beyond what every host
// gets alike: in the whole form each rank's command, directory and own
// environment (Builder.Own: what wins over Shared); in the compact form,
// for the hosts compact says, the host's own variables once (HostOwn),
// and per rank its Place and the little its agent cannot build
// (RankOwn), the job's command and directory once (StartJob.Argv, Dir).
// At eight ranks a host the compact form is a quarter of the bytes, and
// the launcher builds no rank's identity. A start message over the
// protocol's limit (checkStart) is refused here, before anything is
// sent.
func (a Attempt) Starts(compact []bool) ([]HostStart, error) {
	out := make([]HostStart, len(a.names))
	for h := range out {
		if compact[h] {
			out[h] = HostStart{Compact: true, Argv: a.argv, Dir: a.dir, HostEnv: a.b.HostOwn(h)}
		}
	}
	for _, r := range a.ranks {
		hs := &out[r.Host]
		spec := wire.RankSpec{Rank: r.Rank, LocalRank: r.LocalRank, GPUs: r.GPUs}
		if hs.Compact {
			p := a.b.Place(r)
			spec.Place, spec.Env = &p, a.b.RankOwn(r)
		} else {
			spec.Argv, spec.Dir, spec.Env = a.argv, a.dir, a.b.Own(r)
		}
		hs.Ranks = append(hs.Ranks, spec)
	}
	if err := checkStart(a.argv, a.names, a.Shared, out); err != nil {
		return nil, err
	}
	return out, nil
}

// Prepare runs the pipeline for an attempt whose hosts are reached (in
// the layout's order, ranks placed on them): each host's data network
// (logged at -v), each rank's GPUs (written into ranks, read again by
// StartJob), the job's shared values (newJobEnv) and what every rank's
// environment is built from (Attempt.Envs); a variable execve cannot
// pass (CheckSizes) is refused here, before anything is sent.
func Prepare(cfg cli.Config, ranks []plan.Rank, hosts []Host, id string, attempt int, log *zap.Logger) (Attempt, error) {
	if err := CheckSizes(cfg); err != nil {
		return Attempt{}, err
	}
	choices, err := ChooseNetworks(cfg.Network, hosts)
	if err != nil {
		return Attempt{}, err
	}
	logNetworks(log, hosts, choices)
	if err := assignGPUs(cfg.Place, ranks, hosts); err != nil {
		return Attempt{}, err
	}
	he := make([]hostEnv, len(hosts))
	for i, h := range hosts {
		he[i] = hostEnv{Name: h.Name, Addr: DataAddr(h, choices[i])}
		if c := choices[i]; c != nil {
			he[i].Net = nccl.Env(*c)
		}
	}
	// MASTER_ADDR is rank 0's host's data address (loopback for a job on
	// this machine alone), MASTER_PORT a port free there.
	r0 := hosts[ranks[0].Host]
	master := he[ranks[0].Host].Addr
	if len(hosts) == 1 && plan.IsLocal(r0.Host) {
		master = "127.0.0.1"
	}
	j := newJobEnv(cfg, id, attempt, master, r0.Facts.FreePort)
	names := make([]string, len(hosts))
	addrs := make([]string, len(hosts))
	for i, h := range hosts {
		names[i], addrs[i] = h.Name, he[i].Addr
	}
	b := newBuilder(ranks, he, j)
	return Attempt{Choices: choices, Shared: b.Shared(), Addrs: addrs, argv: cfg.Argv, dir: cfg.Env.Dir, ranks: ranks, names: names, b: b}, nil
}

// DryRun is a dry run's environments, from the layout alone: no facts, so
// every host by its name (MASTER_ADDR is rank 0's), no GPU choices, the
// network variables only as far as --network-interface fixes them
// (DryRunNetwork names the rest), and MASTER_PORT the default.
func DryRun(cfg cli.Config, l Layout) *Builder {
	he := make([]hostEnv, len(l.Hosts))
	for i, h := range l.Hosts {
		he[i] = hostEnv{Name: h.Name, Net: forcedNet(cfg.Network)}
	}
	return newBuilder(l.Ranks, he, newJobEnv(cfg, "dry-run", 0, l.Hosts[l.Ranks[0].Host].Name, 0))
}

// CheckNCCL is what looks wrong in the NCCL variables the user gives
// every rank (vars, -x's), on these hosts: a list that selects no up
// interface or active HCA port on some host, a value NCCL does not read
// (nccl.Check).
func CheckNCCL(vars map[string]string, hosts []Host) []nccl.Problem {
	nets := make([]nccl.HostNet, len(hosts))
	for i, h := range hosts {
		nets[i] = h.Facts.HostNet(h.Name, nil)
	}
	return nccl.Check(vars, nets)
}

// maxHostWarnings is how many hosts' problems with one variable
// NCCLWarnings words; the rest are counted.
const maxHostWarnings = 3

// NCCLWarnings words CheckNCCL's problems for the launcher's warnings:
// each variable's problems that concern every host, and of those that
// concern one host the first maxHostWarnings, then how many more hosts
// have one (a thousand hosts without the named interface make one line
// more, not a thousand).
func NCCLWarnings(vars map[string]string, hosts []Host) []string {
	var out []string
	perVar := map[string]int{}
	for _, p := range CheckNCCL(vars, hosts) {
		if p.Host != "" {
			if perVar[p.Var]++; perVar[p.Var] > maxHostWarnings {
				continue
			}
		}
		out = append(out, p.Error())
	}
	for _, k := range slices.Sorted(maps.Keys(perVar)) {
		if n := perVar[k] - maxHostWarnings; n > 0 {
			out = append(out, fmt.Sprintf("%s=%q: the same on %d more hosts", k, vars[k], n))
		}
	}
	return out
}
