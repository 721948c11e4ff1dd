package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/launcher/rankenv"
	"github.com/gangway-hpc/gangway/nccl"
)

// prepare is the gang start's set-up: every host's network and GPUs,
// every rank's environment, the optional cache drop and preflight, then
// StartJob to every host and its Ready. No rank runs before all of that
// succeeded everywhere.
func (j *job) prepare(ctx context.Context) error {
	a, err := j.plan()
	if err != nil {
		return err
	}
	compact := make([]bool, len(j.sessions))
	for i, s := range j.sessions {
		compact[i] = s.facts.ExpandsStart
	}
	starts, err := a.Starts(compact)
	if err != nil {
		return err
	}
	if err := j.dropCaches(ctx); err != nil {
		return err
	}
	if err := j.preflight(ctx, a.Choices, a.Addrs); err != nil {
		return err
	}
	if err := j.runSelftest(ctx, a.Addrs); err != nil {
		return err
	}
	return j.start(ctx, a.Shared, starts)
}

// plan is the attempt's network, GPU and job choices, made from the
// hosts' facts, and its warnings; it then drops every fact the rest of
// the start does not read (factsForStart), before the environments are
// built: at thousands of hosts the decoded facts and the environments,
// held at once, were the launcher's peak heap.
func (j *job) plan() (rankenv.Attempt, error) {
	hosts := views(j.sessions)
	a, err := rankenv.Prepare(j.cfg, j.ranks, hosts, j.id, j.attempt, j.log)
	if err != nil {
		return a, err
	}
	if j.attempt == 0 {
		for _, w := range rankenv.NCCLWarnings(j.cfg.Env.Vars, hosts) {
			j.out.say("warning: " + w)
		}
		for _, w := range rankenv.ReplacedWarnings(j.cfg, hosts, a.Choices) {
			j.out.say("warning: " + w)
		}
	}
	for _, s := range j.sessions {
		s.facts = factsForStart(s.facts)
	}
	return a, nil
}

// hold holds the frames sent through the agent tree's first-level links
// until the returned release (transport.Tree.Hold): a loop that sends
// every host its own message then writes each link's in one write, not
// one per host. Outside a tree it holds nothing.
func (j *job) hold() (release func() error) {
	if j.tree == nil {
		return func() error { return nil }
	}
	return j.tree.Hold()
}

// factsForStart is what the rest of a start, and the job after it,
// reads of a host's facts: its names and agent (labels, messages), the
// preflight's probe port, the self-test's protocol and whether it takes
// the compact start. A job holds its sessions for as long as it runs,
// and at a thousand hosts their decoded facts (NICs, routes, GPU
// topology) were several MB that the GC's headroom doubled.
func factsForStart(f wire.Facts) wire.Facts {
	return wire.Facts{Version: f.Version, Agent: f.Agent, Name: f.Name, Hostname: f.Hostname, ProbePort: f.ProbePort, Selftest: f.Selftest, ExpandsStart: f.ExpandsStart, TakesShared: f.TakesShared}
}

// start sends every host its ranks (rankenv.Attempt.Starts), the
// environment they share, and waits until all are Ready. When every host
// takes the job's shared start (Facts.TakesShared), what all starts share
// (the forwarded environment, most of a start's bytes, and the PMI job)
// goes once, to every host alike (broadcast: once per link of the agent
// tree), and each host's start carries its own part only: the launcher
// encodes and sends the environment once, not once per host.
func (j *job) start(ctx context.Context, shared []string, starts []rankenv.HostStart) error {
	var pmi *wire.PMIJob
	if j.cfg.Env.PMI {
		pmi = pmiJob(j.id, j.ranks, j.universe())
	}
	common := wire.StartJob{JobID: j.id, Env: shared, KillGrace: j.cfg.Control.KillGrace, StdinRank: j.cfg.Out.Stdin, PMI: pmi, Bind: j.cfg.Place.BindSpec()}
	once := !slices.ContainsFunc(j.sessions, func(s *session) bool { return !s.facts.TakesShared })
	if once {
		j.broadcast(wire.KindJob, common)
		common = wire.StartJob{JobID: j.id, Shared: true}
	}
	// The starts of the hosts behind each first-level link of the tree
	// go out together, in as few writes as they fit, not one each.
	release := j.hold()
	for i, s := range j.sessions {
		hs := starts[i]
		sj := common
		sj.Ranks, sj.Argv, sj.Dir, sj.HostEnv = hs.Ranks, hs.Argv, hs.Dir, hs.HostEnv
		starts[i] = rankenv.HostStart{} // sent: its environments may go
		if err := s.conn.Send(wire.KindStart, sj); err != nil {
			_ = release() // the host's own failure says more
			return s.sendFailed("send job", err)
		}
	}
	if err := release(); err != nil {
		return fmt.Errorf("send job through the agent tree: %w", err)
	}
	res, err := j.collect(ctx, wire.KindReady, j.cfg.Transport.StartTimeout)
	if err != nil {
		return err
	}
	for i, m := range res {
		var r wire.Ready
		if err := m.Decode(&r); err != nil {
			return &hostError{Host: j.sessions[i].host.Name, Err: err}
		}
		if r.Err != "" {
			return &hostError{Host: j.sessions[i].host.Name, Err: errors.New(r.Err)}
		}
	}
	return nil
}

// pmiJob builds the PMI description shared by every host.
func pmiJob(jobID string, ranks []plan.Rank, universe int) *wire.PMIJob {
	node := make([]int, len(ranks))
	for _, r := range ranks {
		node[r.Rank] = r.NodeRank
	}
	return &wire.PMIJob{KVSName: "kvs_" + jobID, Size: len(ranks), Mapping: wire.ProcessMapping(node), UniverseSize: universe}
}

// universe is the universe size PMI tells the ranks (-usize).
func (j *job) universe() int {
	slots := make([]int, len(j.sessions))
	for i, s := range j.sessions {
		slots[i] = s.host.Slots
	}
	return universeSize(j.cfg.Env.Universe, slots, j.ranks)
}

// universeSize resolves -usize u for ranks placed on hosts with slots (by
// host index): a size is itself, SYSTEM is Hydra's (the slots of the
// hosts that run ranks), and unset or INFINITE is -1, unknown.
func universeSize(u int, slots []int, ranks []plan.Rank) int {
	switch {
	case u > 0:
		return u
	case u == cli.UniverseSystem:
		used := make([]bool, len(slots))
		for _, r := range ranks {
			used[r.Host] = true
		}
		n := 0
		for i, s := range slots {
			if used[i] {
				n += s
			}
		}
		return n
	}
	return -1
}

// errPreflight is returned when hosts cannot reach each other.
var errPreflight = errors.New("preflight failed")

// preflight has every host open a TCP connection to every other host's
// agent on its chosen address (all pairs up to 32 hosts, a ring beyond or
// with --transport ssh),
// so a broken link fails the job before any rank starts.
func (j *job) preflight(ctx context.Context, choices []*nccl.Choice, addrs []string) error {
	n := len(j.sessions)
	if n < 2 || !j.cfg.Network.Preflight {
		return nil
	}
	target := make([]string, n)
	cheap := true // every target is an agent's listener, not sshd
	for i, s := range j.sessions {
		// The host's address on its data interface, chosen as for
		// MASTER_ADDR (rankenv.DataAddr): the address the launcher
		// reached it on when that lies on the interface (an agent may
		// listen on that address only, as loopback agents on 127.0.0.2
		// do), else the interface's. An agent started for this job
		// (--transport ssh) offers a probe port of its own; an older one
		// gets sshd's port dialled.
		port, sshd := probePort(j.cfg.Transport, s)
		cheap = cheap && !sshd
		target[i] = net.JoinHostPort(addrs[i], strconv.Itoa(port))
	}
	probes := make([][]int, n) // host -> peers it dials
	// A probe of sshd's port makes the peer's sshd fork (and re-execute)
	// a process, so the check is a ring then; agents are cheap to dial,
	// so small jobs check every pair.
	allPairs := n <= 32 && cheap
	for i := range n {
		if allPairs {
			for k := range n {
				if k != i {
					probes[i] = append(probes[i], k)
				}
			}
		} else {
			probes[i] = []int{(i + 1) % n}
		}
	}
	release := j.hold()
	for i, s := range j.sessions {
		p := wire.Probe{Timeout: 5 * time.Second}
		for _, k := range probes[i] {
			p.Targets = append(p.Targets, target[k])
		}
		if err := s.conn.Send(wire.KindProbe, p); err != nil {
			_ = release() // the host's own failure says more
			return s.sendFailed("send preflight", err)
		}
	}
	if err := release(); err != nil {
		return fmt.Errorf("send preflight through the agent tree: %w", err)
	}
	res, err := j.collect(ctx, wire.KindProbeResult, 30*time.Second)
	if err != nil {
		return err
	}
	var bad []string
	for i, s := range j.sessions {
		var pr wire.ProbeResult
		if err := res[i].Decode(&pr); err != nil {
			return &hostError{Host: s.host.Name, Err: err}
		}
		via := ""
		if c := choices[i]; c != nil && len(c.Ifaces) > 0 {
			via = " via " + strings.Join(c.Ifaces, ",")
		}
		for k, r := range pr.Results {
			if r.Err != "" && k < len(probes[i]) {
				peer := label(j.sessions[probes[i][k]])
				bad = append(bad, fmt.Sprintf("  %s -> %s (%s%s): %s", label(s), peer, r.Target, via, r.Err))
			}
		}
	}
	if len(bad) > 0 {
		j.out.say(fmt.Sprintf("preflight: %d of the host pairs cannot connect:\n%s", len(bad), strings.Join(bad, "\n")))
		return fmt.Errorf("%w: hosts cannot reach each other on their chosen interfaces (--preflight=false skips this check)", errPreflight)
	}
	return nil
}

// dropCaches asks every host to sync and drop its page caches, in
// parallel, and reports the time each took.
func (j *job) dropCaches(ctx context.Context) error {
	if j.cfg.Network.DropCaches == 0 {
		return nil
	}
	j.broadcast(wire.KindPrepare, wire.Prepare{DropCaches: j.cfg.Network.DropCaches})
	res, err := j.collect(ctx, wire.KindPrepared, 5*time.Minute)
	if err != nil {
		return err
	}
	var errs []error
	for i, s := range j.sessions {
		var p wire.Prepared
		if err := res[i].Decode(&p); err != nil {
			return err
		}
		if p.Err != "" {
			if j.cfg.Network.DropCachesBestEffort {
				j.out.say(fmt.Sprintf("drop caches on %s failed (best effort): %s", s.host.Name, p.Err))
				continue
			}
			errs = append(errs, &hostError{Host: s.host.Name, Err: errors.New(p.Err)})
			continue
		}
		j.out.say(fmt.Sprintf("dropped page caches on %s in %v", s.host.Name, p.Took.Round(time.Millisecond)))
	}
	if len(errs) > 0 {
		return fmt.Errorf("--drop-caches (use --drop-caches-best-effort to go on): %w", errors.Join(errs...))
	}
	return nil
}
