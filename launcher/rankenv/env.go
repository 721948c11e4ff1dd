package rankenv

import (
	"cmp"
	"encoding/json"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/nccl"
)

// hostEnv is what the environment needs to know about one host.
type hostEnv struct {
	Name string // the name the launcher knows it by (HOROVOD_HOSTNAME)
	// Addr is its address on the data network (MASTER_ADDR's choice for
	// it), for TF_CONFIG's worker list; "" means Name.
	Addr string
	// Net is host-specific network environment (NCCL_SOCKET_IFNAME...).
	Net []string
}

// defaultMasterPort is MASTER_PORT when rank 0's host reported no free
// port (and for a dry run): torchrun's default.
const defaultMasterPort = 29500

// jobEnv is what is the same for every rank.
type jobEnv struct {
	JobID      string
	MasterAddr string
	MasterPort int
	Vars       map[string]string // -x, -genv and --env-file
	Sources    map[string]string // where each of Vars came from (cli.SrcX...)
	MCA        []string          // OMPI_MCA_KEY=VALUE
	// Forward is what every rank gets of the launcher's own environment
	// (Forwarded), sorted KEY=VALUE.
	Forward []string
	// torchrun's restart contract: the run's id, this attempt's number
	// and the most restarts the run may make.
	RunID       string
	Restart     int
	MaxRestarts int
	// TFPort, when not 0, sets TF_CONFIG (--tf-config).
	TFPort int
}

// newJobEnv is what every rank's environment shares, for a run and a dry
// run alike: the job's id; MASTER_ADDR, master (rank 0's host's data
// address) unless --master-addr; MASTER_PORT, freePort on rank 0's host
// (defaultMasterPort when it reported none) unless --master-port; -x,
// -genv, --env-file and -mca; what the ranks get of the launcher's own
// environment (Forwarded); torchrun's restart contract (--run-id, else
// the job's id, and the attempt); --tf-config's port.
func newJobEnv(cfg cli.Config, id string, attempt int, master string, freePort int) jobEnv {
	e := cfg.Env
	return jobEnv{JobID: id, MasterAddr: cmp.Or(e.MasterAddr, master), MasterPort: cmp.Or(e.MasterPort, freePort, defaultMasterPort),
		Vars: e.Vars, Sources: e.Sources, MCA: e.MCA, Forward: Forwarded(e.Launcher, e.Forward, e.ForwardList),
		RunID: cmp.Or(cfg.Control.RunID, id), Restart: attempt, MaxRestarts: cfg.Control.MaxRestarts, TFPort: e.TFPort}
}

// userWins reports whether the user's -x (or --env-file) sets key, and
// so wins over whatever the launcher would give every rank for it: the
// one place that rule is decided. A rank's identity (plan.IsIdentity) is
// the launcher's alone, and --tf-config wins over -x TF_CONFIG (it asked
// for this one).
func userWins(user map[string]string, key string) bool {
	_, set := user[key]
	return set && !plan.IsIdentity(key)
}

// Builder holds what every rank's environment is computed from, so that
// a dry run can print a million ranks' environments one at a time.
//
// What is the same for every rank (the job's values, -mca, -x, the
// forwarded environment) and for every rank of a host (its name, its
// network variables) is merged once, into job and host; a rank's own
// environment is then its few identity variables merged with those two
// (vars), not a map of forty built per rank: at 10,000 hosts x 8 ranks
// the launcher builds 80,000 environments.
type Builder struct {
	hosts     []hostEnv
	j         jobEnv
	size      int
	groups    int     // hosts that run ranks
	cross     [][]int // host -> local rank -> its host's index among the hosts with that local rank
	crossSize []int   // local rank -> hosts that have it
	// tfCluster is TF_CONFIG up to the task's index, shared by every rank.
	tfCluster string
	// job is what every rank gets alike (the forwarded environment
	// included), jobOwn the same without the forwarded environment, host
	// what every rank of each host gets. Each is sorted by name, one
	// entry per name.
	job, jobOwn []entry
	host        [][]entry
}

// entry is one variable of a step of Vars, with its KEY=VALUE made once
// and its precedence: where two steps set a name, the higher prec wins;
// shared says it is one every rank gets alike (Builder.job).
type entry struct {
	Var
	kv     string
	prec   int
	shared bool
}

// The steps of Vars, in precedence order; an entry's prec is its step
// times stepSpan plus its place within the step (later wins).
const (
	stepForwarded = iota + 1
	stepLauncher
	stepCUDA
	stepNet
	stepMCA
	stepUser
	stepTF
	stepSpan = 1 << 24
)

func newEntry(k, v, src string, prec int) entry {
	kv := k + "=" + v
	return entry{Var: Var{kv[:len(k)], kv[len(k)+1:], src}, kv: kv, prec: prec}
}

// newBuilder prepares the environments of ranks, placed on hosts.
func newBuilder(ranks []plan.Rank, hosts []hostEnv, j jobEnv) *Builder {
	b := &Builder{hosts: hosts, j: j, size: len(ranks), cross: make([][]int, len(hosts))}
	local := make([]int, len(hosts))
	for _, r := range ranks {
		local[r.Host]++
	}
	for h, n := range local {
		if n > 0 {
			b.groups++
		}
		for l := range n {
			if l == len(b.crossSize) {
				b.crossSize = append(b.crossSize, 0)
			}
			b.cross[h] = append(b.cross[h], b.crossSize[l])
			b.crossSize[l]++
		}
	}
	if j.TFPort > 0 {
		b.tfCluster = tfCluster(ranks, hosts, j.TFPort)
	}
	b.job = b.jobEntries()
	// Without the forwarded environment: the lowest step, it wins only
	// names no other step sets, so dropping its winners leaves exactly
	// the other steps' settled entries.
	b.jobOwn = slices.DeleteFunc(slices.Clone(b.job), func(e entry) bool { return e.Src == SrcForwarded })
	b.host = make([][]entry, len(hosts))
	for i, h := range hosts {
		e := []entry{
			newEntry("HOROVOD_HOSTNAME", h.Name, SrcLauncher, stepLauncher*stepSpan),
			newEntry("GANGWAY_HOST", h.Name, SrcLauncher, stepLauncher*stepSpan),
		}
		for k, kv := range h.Net {
			key, v, _ := strings.Cut(kv, "=")
			e = append(e, entry{Var: Var{key, v, SrcNCCL}, kv: kv, prec: stepNet*stepSpan + k})
		}
		b.host[i] = settle(e)
	}
	return b
}

// jobEntries are the steps of Vars that are the same for every rank:
// the forwarded environment, the job's launcher values, -mca and -x.
func (b *Builder) jobEntries() []entry {
	j, size := b.j, itoa(b.size)
	var e []entry
	for k, kv := range j.Forward {
		key, v, _ := strings.Cut(kv, "=")
		e = append(e, entry{Var: Var{key, v, SrcForwarded}, kv: kv, prec: stepForwarded*stepSpan + k})
	}
	for _, kv := range [][2]string{
		{"WORLD_SIZE", size}, {"GROUP_WORLD_SIZE", itoa(b.groups)},
		{"ROLE_WORLD_SIZE", size}, {"ROLE_NAME", "default"},
		{"MASTER_ADDR", j.MasterAddr}, {"MASTER_PORT", itoa(j.MasterPort)},
		{"OMPI_COMM_WORLD_SIZE", size}, {"PMI_SIZE", size}, {"HOROVOD_SIZE", size},
		{"GANGWAY_JOB_ID", j.JobID},
		{"PYTHONUNBUFFERED", "1"},
		{"PYTHONFAULTHANDLER", "1"}, // Python ranks print their stacks on SIGABRT (hang diagnosis)
		{"TORCHELASTIC_RUN_ID", j.RunID},
		{"TORCHELASTIC_RESTART_COUNT", itoa(j.Restart)},
		{"TORCHELASTIC_MAX_RESTARTS", itoa(j.MaxRestarts)},
	} {
		e = append(e, newEntry(kv[0], kv[1], SrcLauncher, stepLauncher*stepSpan))
	}
	for k, kv := range j.MCA {
		key, v, _ := strings.Cut(kv, "=")
		e = append(e, entry{Var: Var{key, v, SrcMCA}, kv: kv, prec: stepMCA*stepSpan + k})
	}
	for k, v := range j.Vars {
		if userWins(j.Vars, k) {
			e = append(e, newEntry(k, v, cmp.Or(j.Sources[k], cli.SrcX), stepUser*stepSpan))
		}
	}
	for i := range e {
		e[i].shared = true
	}
	return settle(e)
}

// settle sorts entries by name and keeps, of each name, the entry of
// highest precedence (the later of equals).
func settle(e []entry) []entry {
	slices.SortStableFunc(e, func(a, b entry) int { return strings.Compare(a.Key, b.Key) })
	out := e[:0]
	for _, x := range e {
		if n := len(out); n > 0 && out[n-1].Key == x.Key {
			if x.prec >= out[n-1].prec {
				out[n-1] = x
			}
			continue
		}
		out = append(out, x)
	}
	return slices.Clip(out)
}

// tfCluster is the part of TF_CONFIG every rank shares, as Kubeflow's
// TFJob writes it: {"cluster":{"worker":["ADDR:PORT",...]},"task":
// {"type":"worker","index": - the rank's index and "},"environment":
// "cloud"} follow. Worker i is rank i, on its host's data address at
// port plus its local rank.
func tfCluster(ranks []plan.Rank, hosts []hostEnv, port int) string {
	workers := make([]string, len(ranks))
	for _, r := range ranks {
		addr := cmp.Or(hosts[r.Host].Addr, hosts[r.Host].Name)
		workers[r.Rank] = net.JoinHostPort(addr, strconv.Itoa(port+r.LocalRank))
	}
	cluster, _ := json.Marshal(map[string][]string{"worker": workers})
	return `{"cluster":` + string(cluster) + `,"task":{"type":"worker","index":`
}

// Where a rank's variable comes from besides the user's flags
// (cli.SrcX, cli.SrcGenv, cli.SrcEnvFile): --dry-run groups a rank's
// variables by these, in this order.
const (
	SrcLauncher  = "launcher"    // the rank's identity, placement and the job's rendezvous
	SrcNCCL      = "nccl"        // the host's data network choice (NCCL_SOCKET_IFNAME...)
	SrcMCA       = "-mca"        // OMPI_MCA_* from -mca
	SrcTFConfig  = "--tf-config" // TF_CONFIG
	SrcForwarded = "forwarded"   // the launcher's own environment (Forwarded)
)

// SourceOrder is the order --dry-run prints a rank's groups in.
var SourceOrder = []string{SrcLauncher, SrcNCCL, SrcMCA, cli.SrcEnvFile, cli.SrcGenv, cli.SrcX, SrcTFConfig, SrcForwarded}

// Var is one variable of a rank's environment and where it came from.
type Var struct {
	Key, Value, Src string
}

// Rank is one rank's environment, sorted.
func (b *Builder) Rank(r plan.Rank) []string {
	env := make([]string, 0, len(b.job)+len(b.host[r.Host])+20)
	b.vars(r, b.job, func(e *entry) { env = append(env, e.kv) })
	return env
}

// Shared is what every rank gets alike, sorted KEY=VALUE: the forwarded
// environment, the job's values (WORLD_SIZE, MASTER_ADDR...), -mca and
// -x, each name once, as the steps of Vars settle it. It travels once per
// host (StartJob.Env), below each rank's Own: at eight ranks a host it is
// most of a start message.
func (b *Builder) Shared() []string {
	out := make([]string, len(b.job))
	for i, e := range b.job {
		out[i] = e.kv
	}
	return out
}

// Own is what one rank gets beyond Shared, sorted KEY=VALUE: its
// identity, its host's name and network variables, where they win over
// Shared's (RankSpec.Env, which the agent puts over StartJob.Env). Rank
// is Own over Shared. It is the whole form of a start; the compact one
// sends HostOwn once per host and RankOwn and Place per rank.
//
// The forwarded environment is the lowest step, so it never wins over a
// rank's or host's own entry: Own merges without it (a big forwarded
// environment is not walked once per rank).
func (b *Builder) Own(r plan.Rank) []string {
	return b.ownRank(r, b.host[r.Host], true)
}

// HostOwn is what every rank of host h gets beyond Shared, sorted
// KEY=VALUE: the host's name and network variables where they win over
// Shared's (StartJob.HostEnv in the compact form).
func (b *Builder) HostOwn(h int) []string {
	return b.own(b.host[h], nil)
}

// RankOwn is what rank r gets beyond Shared, HostOwn and its identity
// (which its agent builds from Place: wire.Identity), sorted KEY=VALUE:
// its GPUs and TF_CONFIG where they win over Shared's (RankSpec.Env in
// the compact form). A rank's entries and its host's have no name in
// common, so Own is HostOwn, RankOwn and the identity together.
func (b *Builder) RankOwn(r plan.Rank) []string {
	return b.ownRank(r, nil, false)
}

// Place is where rank r sits in the job (its node, local size and cross
// rank): what its identity is built from (wire.Identity).
func (b *Builder) Place(r plan.Rank) wire.Place {
	return wire.Place{Node: r.NodeRank, LocalSize: r.LocalSize, Cross: b.cross[r.Host][r.LocalRank], CrossSize: b.crossSize[r.LocalRank]}
}

// ownRank is own of host's entries and rank r's (rankEntries, its
// identity among them or not).
func (b *Builder) ownRank(r plan.Rank, host []entry, identity bool) []string {
	rank := b.rankEntries(r, identity)
	defer rankEntryPool.Put(rank)
	return b.own(host, *rank)
}

// own is, of the job's entries (without the forwarded ones) merged with
// host and rank, those that are not the job's, in name order.
func (b *Builder) own(host, rank []entry) []string {
	env := make([]string, 0, len(host)+len(rank))
	merge(func(e *entry) {
		if !e.shared {
			env = append(env, e.kv)
		}
	}, [3][]entry{b.jobOwn, host, rank})
	return env
}

// Vars is one rank's environment with each variable's source, sorted by
// name. Each step overwrites the one before:
//
//  1. the launcher's environment (Forwarded), lowest;
//  2. the rank's identity, the job's values and CUDA_VISIBLE_DEVICES;
//  3. the host's network variables (NCCL_SOCKET_IFNAME...);
//  4. -mca as OMPI_MCA_*;
//  5. -x, -genv and --env-file, except the identity keys (userWins);
//  6. TF_CONFIG from --tf-config.
func (b *Builder) Vars(r plan.Rank) []Var {
	out := make([]Var, 0, len(b.job)+len(b.host[r.Host])+20)
	b.vars(r, b.job, func(e *entry) { out = append(out, e.Var) })
	return out
}

// vars is Vars, each variable given to emit in name order: job (the
// job's entries, with or without the forwarded ones) and the host's
// entries merged with the rank's own.
func (b *Builder) vars(r plan.Rank, job []entry, emit func(*entry)) {
	rank := b.rankEntries(r, true)
	merge(emit, [3][]entry{job, b.host[r.Host], *rank})
	rankEntryPool.Put(rank)
}

// rankEntries are rank r's own entries in name order: its GPUs, its
// identity (wire.Identity; left out for the compact form, whose agent
// builds it) and TF_CONFIG. The list comes from rankEntryPool, where the
// caller puts it back (what it keeps it copies): sorting a rank's names
// per rank was half of the work, one list per rank most of the
// launcher's allocations while it built eight ranks a host's
// environments.
func (b *Builder) rankEntries(r plan.Rank, identity bool) *[]entry {
	l := stepLauncher * stepSpan
	buf := rankEntryPool.Get().(*[]entry)
	rank := (*buf)[:0]
	if r.GPUs != nil {
		rank = append(rank,
			newEntry("CUDA_DEVICE_ORDER", "PCI_BUS_ID", SrcLauncher, stepCUDA*stepSpan),
			newEntry("CUDA_VISIBLE_DEVICES", nccl.CUDAVisibleDevices(r.GPUs), SrcLauncher, stepCUDA*stepSpan))
	}
	if identity {
		wire.Identity(r.Rank, r.LocalRank, b.Place(r), func(k, v string) { rank = append(rank, newEntry(k, v, SrcLauncher, l)) })
	}
	if b.tfCluster != "" {
		// --tf-config wins over -x TF_CONFIG: it asked for this one.
		rank = append(rank, newEntry("TF_CONFIG", b.tfCluster+itoa(r.Rank)+`},"environment":"cloud"}`, SrcTFConfig, stepTF*stepSpan))
	}
	*buf = rank
	return buf
}

// rankEntryPool holds rankEntries' scratch lists.
var rankEntryPool = sync.Pool{New: func() any { b := make([]entry, 0, 20); return &b }}

// merge gives emit, in name order, the entry of highest precedence for
// each name in lists (each sorted by name, one entry per name).
func merge(emit func(*entry), lists [3][]entry) {
	var at [3]int
	for {
		var best *entry
		for i, l := range lists {
			if at[i] == len(l) {
				continue
			}
			e := &l[at[i]]
			if best == nil || e.Key < best.Key || (e.Key == best.Key && e.prec > best.prec) {
				best = e
			}
		}
		if best == nil {
			return
		}
		for i, l := range lists {
			if at[i] < len(l) && l[at[i]].Key == best.Key {
				at[i]++
			}
		}
		emit(best)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
