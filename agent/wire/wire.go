// Package wire defines the launcher-agent protocol: message kinds, their
// payloads, and a framed codec that both sides share.
//
// A frame is one byte of kind, four bytes of big-endian payload length, then
// the payload, at most Limit(kind) bytes (limits.go); a frame of an
// unknown kind or over its limit ends the session with an error naming
// the kind and the size. Control messages carry JSON; the two hot paths (rank output
// and stdin) carry a small binary header and raw bytes, so output is never
// base64-encoded or copied through a JSON encoder.
//
// The launcher opens the SSH subsystem named Subsystem (or runs
// `agent --stdio`) and speaks first with Hello. The agent answers with Facts,
// or with Error when the protocol versions differ.
package wire

import (
	"time"

	"github.com/gangway-hpc/gangway/internal/netchoice"
)

// Version is the protocol version. Both sides refuse a peer whose Hello or
// Facts carries another number, with a message naming both versions.
// Version 2 added Name and NameReply (a version-1 launcher would take an
// agent's Name for a protocol violation mid-job) and PMIJob.UniverseSize.
// Version 3 added Hello.Health and Facts.Health: a version-2 agent would
// ignore a site's --health-check and start ranks on a host that fails it.
// Version 4 added StartJob.Env (a version-3 agent would drop it, and the
// ranks the launcher's forwarded environment, silently).
// Version 5 added the agent tree's kinds (relay.go): a version-4 agent
// would take a Link for a protocol violation. Version 6 added Ends
// (KindEnds): a relay of version 5 would cut off a child that sent one.
const Version = 6

// Subsystem is the SSH subsystem name the agent serves the protocol on.
const Subsystem = "gangway"

// Kind says which message a frame holds.
type Kind uint8

// Message kinds. L->A is launcher to agent, A->L agent to launcher.
const (
	KindHello          Kind = iota + 1 // L->A Hello
	KindFacts                          // A->L Facts
	KindStart                          // L->A StartJob: prepare ranks, do not run them
	KindReady                          // A->L Ready: every local rank is prepared (or Err)
	KindGo                             // L->A (no payload): spawn the prepared ranks
	KindStarted                        // A->L Started: pids of spawned ranks
	KindOutput                         // A->L binary: rank output, whole lines
	KindStdin                          // L->A binary: bytes for a rank's stdin; empty = EOF
	KindExit                           // A->L Exit: one rank ended (or, told Hello.BatchExits, a JSON array of several: Msg.Exits)
	KindSignal                         // L->A Signal: send a signal to every rank's group
	KindStop                           // L->A Stop: SIGTERM every group, SIGKILL after grace
	KindFence                          // A->L Fence: every local rank entered barrier Seq
	KindFenceDone                      // L->A FenceDone: every host entered barrier Seq
	KindAbort                          // A->L Abort: a rank asked to abort the job (PMI)
	KindDone                           // A->L (no payload): every local rank ended, groups reaped
	KindError                          // either way: Error, fatal for the session
	KindPrepare                        // L->A Prepare: node preparation before StartJob
	KindPrepared                       // A->L Prepared
	KindProbe                          // L->A Probe: dial peers (reachability preflight)
	KindProbeResult                    // A->L ProbeResult
	KindStdinAck                       // A->L (no payload): a stdin chunk was written; send the next
	KindPing                           // L->A (no payload): the launcher is alive (heartbeat, every few seconds)
	KindDump                           // L->A Dump: collect every local rank's stacks (hang diagnosis)
	KindDumped                         // A->L Dumped: the stacks
	KindName                           // A->L Name: a rank's PMI name-service request (publish, unpublish, lookup)
	KindNameReply                      // L->A NameReply: the job-wide name table's answer
	KindSelftest                       // L->A Selftest: one step of the fabric self-test (selftest.go)
	KindSelftestResult                 // A->L SelftestResult
	KindRelayKey                       // L->A RelayKey: the job certificate this relay logs in to its children with (relay.go)
	KindLink                           // L->A Link: open a session to a child host
	KindLinked                         // A->L Linked: the child's session is open, or why not
	KindUnlink                         // L->A Unlink: close a child's session
	KindCut                            // A->L Cut: a child's session ended
	KindRelay                          // L->A binary: a frame for a child (host, then the frame)
	KindRelayed                        // A->L binary: a frame from a child (host, then the frame)
	KindSpread                         // L->A binary: one frame for this host and every host below it
	KindFences                         // A->L Fences: a subtree's hosts entered barrier Seq (relay.go)
	KindGathered                       // A->L Gathered: a subtree's answers of one kind, in one frame (relay.go)
	KindJob                            // L->A StartJob: what every host's start shares, sent once (spread) before the hosts' own (StartJob.Shared)
	KindEnds                           // A->L Ends: hosts whose every rank exited 0, told Hello.Ends, in place of their exits and Done (relay.go)
)

var kindNames = map[Kind]string{
	KindHello: "hello", KindFacts: "facts", KindStart: "start", KindReady: "ready",
	KindGo: "go", KindStarted: "started", KindOutput: "output", KindStdin: "stdin",
	KindExit: "exit", KindSignal: "signal", KindStop: "stop", KindFence: "fence",
	KindFenceDone: "fence-done", KindAbort: "abort", KindDone: "done", KindError: "error",
	KindPrepare: "prepare", KindPrepared: "prepared", KindProbe: "probe", KindProbeResult: "probe-result",
	KindStdinAck: "stdin-ack", KindPing: "ping", KindDump: "dump", KindDumped: "dumped",
	KindName: "name", KindNameReply: "name-reply", KindSelftest: "selftest", KindSelftestResult: "selftest-result",
	KindRelayKey: "relay-key", KindLink: "link", KindLinked: "linked", KindUnlink: "unlink", KindCut: "cut",
	KindRelay: "relay", KindRelayed: "relayed", KindSpread: "spread", KindFences: "fences",
	KindGathered: "gathered", KindJob: "job", KindEnds: "ends",
}

func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return "kind(" + itoa(int(k)) + ")"
}

// Stream names a rank's output stream.
type Stream uint8

// Output streams.
const (
	Stdout Stream = 1
	Stderr Stream = 2
)

func (s Stream) String() string {
	switch s {
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	}
	return "stream(" + itoa(int(s)) + ")"
}

// Hello opens a session.
type Hello struct {
	Version  int    `json:"version"`
	Launcher string `json:"launcher"` // launcher's version string, for logs
	JobID    string `json:"job_id"`
	Host     string `json:"host"` // the name the launcher knows this host by
	// Peers are the other hosts of the job, as names or IP literals (IP
	// literals where the transport learnt the addresses before the
	// sessions, as srun's readiness lines give them); the agent reports
	// its route to each in Facts.Routes.
	Peers []string `json:"peers,omitempty"`
	// ResolveWaitMS: a peer name that does not resolve (NXDOMAIN) is
	// looked up again, every 250 ms, for up to this long before the agent
	// answers with its facts: the launcher of an mpi-operator job asks
	// for it (a worker pod's DNS record appears once the pod is up, and
	// its peers' routes are taken at the Hello). 0: no wait. Older agents
	// ignore it.
	ResolveWaitMS int64 `json:"resolve_wait_ms,omitempty"`
	// Health asks the agent to check its host before this attempt; nil
	// asks for no checks (--no-health-check).
	Health *HealthRequest `json:"health,omitempty"`
	// Net asks the agent to choose its host's data interface itself, from
	// its routes to Peers (Facts.HostNet, netchoice.Choose), and to answer
	// with the choice in Facts.Net instead of the routes in Facts.Routes:
	// a launch of thousands of hosts then neither receives nor works
	// through every host's routes. Nil: report the routes (--inspect shows
	// them; an older launcher chooses itself).
	Net *NetRequest `json:"net,omitempty"`
	// BatchExits says the launcher takes several ranks' exits in one
	// exit frame: an agent whose ranks end together (eight of a DGX host
	// at the job's end) sends the exits that waited as one JSON array of
	// Exit (Msg.Exits), at most MaxExitBatch bytes of them, instead of
	// one frame each: those that came while an exit frame was being
	// sent, and successes, which wait a moment for the host's other
	// ranks while any still runs. A failure, a signal, a stop and the
	// last rank's exit go at once. Older agents ignore it; relays pass
	// exit frames on as they are.
	BatchExits bool `json:"batch_exits,omitempty"`
	// Gather says the launcher takes a relay's Gathered: a relay of the
	// agent tree then answers a start (Ready), a preflight (ProbeResult)
	// and Go (Started) for itself and its subtree in one frame
	// (relay.go). Older agents ignore it and each host answers alone.
	Gather bool `json:"gather,omitempty"`
	// Brief asks for the facts a launch reads (Facts.Briefed): of the
	// GPUs their indices and NUMA nodes, of their topology the links,
	// not the names, UUIDs, bus ids and CPU lists that only --inspect
	// shows. The launcher decodes every host's facts; on a DGX the GPUs
	// and their topology are a third of them. Older agents send all.
	Brief bool `json:"brief,omitempty"`
	// FenceSpans says the launcher takes a relay's Fences with its hosts
	// as Spans: the launcher sends it to the hosts it reaches itself, the
	// first level of the tree, whose subtrees' hosts are a few runs of
	// indices (a first-level relay of 10,000 hosts names about 312 in
	// each barrier, three runs). Deeper relays are not told: they send
	// Hosts to their relay, which merges them. Older agents ignore it.
	FenceSpans bool `json:"fence_spans,omitempty"`
	// Ends says the launcher takes Ends: a host whose every rank exited 0
	// sends one Ends in place of its ranks' exits and its Done, and a
	// relay of the agent tree holds its subtree's and sends them up
	// together, once its subtree has ended (relay.go). A failure is sent
	// as it comes, as ever. Told it, the agent ends every job it
	// started with an Ends marked Last. Older agents ignore it.
	Ends bool `json:"ends,omitempty"`
}

// MaxExitBatch bounds the exits batched into one exit frame (their error
// files included), well under the frame's MaxControl.
const MaxExitBatch = MaxControl / 2

// NetRequest is Hello.Net.
type NetRequest struct {
	// Force is --network-interface: use these interfaces, once checked
	// to exist, be up and have an address.
	Force []string `json:"force,omitempty"`
	// Brief asks for the facts without the host's interfaces
	// (Facts.NICs): once the host chooses, the launcher reads them only
	// to judge a user's NCCL_SOCKET_IFNAME (it does not ask Brief then)
	// and, of a relay, for the addresses its job certificate names (nor
	// for a relay); NetChoice.Addrs carries the rest. On a DGX H100 the
	// interfaces are about 30% of the facts' bytes, which the launcher
	// decodes for every host of a launch. Older agents send them anyway.
	Brief bool `json:"brief,omitempty"`
}

// NetChoice is a host's own choice of its data interface (Facts.Net):
// netchoice.Choice, or why there is none.
type NetChoice struct {
	Ifaces []string `json:"ifaces,omitempty"` // NCCL_SOCKET_IFNAME, best first
	Addr   string   `json:"addr,omitempty"`   // an address on Ifaces[0]
	HCAs   []string `json:"hcas,omitempty"`   // ACTIVE IB/RoCE ports as "mlx5_0:1"
	Forced bool     `json:"forced,omitempty"` // Ifaces are NetRequest.Force
	// Addrs are every address (CIDR) of Ifaces[0]: the launcher checks
	// whether the address it reached the host on lies there (it then
	// gives that address to the other hosts).
	Addrs []string `json:"addrs,omitempty"`
	// Err says why no interface could be chosen (netchoice.Choose's
	// error, naming the host and the peers it has no route to); the
	// launcher fails the attempt with it.
	Err string `json:"err,omitempty"`
}

// Facts describes the agent's host. Discovery fills what it can; empty
// fields mean "not known", never "none" unless documented.
type Facts struct {
	Version   int    `json:"version"`
	Agent     string `json:"agent"` // agent's version string
	Name      string `json:"name"`  // --name, default hostname
	Hostname  string `json:"hostname"`
	CPUs      int    `json:"cpus"`
	NUMANodes int    `json:"numa_nodes"`
	// Sockets counts the distinct physical_package_id of the online CPUs;
	// 0 means unknown (an older agent, or no topology in sysfs).
	Sockets int `json:"sockets,omitempty"`
	// FreePort is a TCP port that was free on every address of this host
	// when Facts was built (MASTER_PORT for rank 0's host).
	FreePort int `json:"free_port,omitempty"`
	// ProbePort is a TCP port on every address of this host that accepts
	// connections and closes them at once, for other hosts' preflight
	// probes: agents started for one job (--stdio) have no listener of
	// their own, and a probe of sshd's port costs a forked sshd. 0: probe
	// the agent's (or sshd's) port.
	ProbePort     int      `json:"probe_port,omitempty"`
	NICs          []NIC    `json:"nics,omitempty"`
	HCAs          []HCA    `json:"hcas,omitempty"`
	GPUs          []GPU    `json:"gpus,omitempty"`
	GPUTopo       *Topo    `json:"gpu_topo,omitempty"`
	CanDropCaches bool     `json:"can_drop_caches"`
	DiscoveryErrs []string `json:"discovery_errors,omitempty"`
	// Routes are the routes this host uses to reach the peers it was asked
	// about (agent/facts Options.Peers), one entry per resolved address.
	Routes []Route `json:"routes,omitempty"`
	// Selftest is the fabric self-test protocol the agent serves
	// (SelftestVersion); 0: none, an older agent that would take a
	// Selftest frame for a protocol violation.
	Selftest int `json:"selftest,omitempty"`
	// ExpandsStart says the agent takes StartJob's compact form
	// (StartJob.Expand); an agent without it gets the whole form.
	ExpandsStart bool `json:"expands_start,omitempty"`
	// TakesShared says the agent takes the job's shared start (KindJob)
	// and starts that refer to it (StartJob.Shared); the launcher uses
	// them only when every host's facts say so.
	TakesShared bool `json:"takes_shared,omitempty"`
	// Containment is what holds the agent's ranks beyond their process
	// groups: "cgroup2 DIR + subreaper supervisor", or "subreaper
	// supervisor (no writable cgroup2: why)".
	Containment string `json:"containment,omitempty"`
	// Health is the host's answer to Hello.Health, checked for this
	// attempt; nil when none was asked for.
	Health *Health `json:"health,omitempty"`
	// Net is the host's choice of its data interface, when Hello.Net
	// asked for it (Routes is then empty); nil otherwise.
	Net *NetChoice `json:"net,omitempty"`
}

// Briefed is f as an agent answers Hello h: without its interfaces when
// h.Net asks it to be brief (NetRequest.Brief), and with only the GPUs'
// indices and NUMA nodes and the topology's links when h.Brief asks.
// f itself is not changed.
func (f Facts) Briefed(h Hello) Facts {
	if h.Net != nil && h.Net.Brief {
		f.NICs = nil
	}
	if h.Brief {
		if f.GPUs != nil {
			gs := make([]GPU, len(f.GPUs))
			for i, g := range f.GPUs {
				gs[i] = GPU{Index: g.Index, NUMANode: g.NUMANode}
			}
			f.GPUs = gs
		}
		if f.GPUTopo != nil {
			f.GPUTopo = &Topo{Link: f.GPUTopo.Link}
		}
	}
	return f
}

// HostNet is what the interface choice reads of f: its interfaces,
// routes and InfiniBand ports, for the host the launcher calls host,
// whose peers (as the host was told them) are peers.
func (f Facts) HostNet(host string, peers []string) netchoice.HostNet {
	h := netchoice.HostNet{Host: host, Peers: peers, NICs: make([]netchoice.NIC, 0, len(f.NICs)), Routes: make([]netchoice.Route, 0, len(f.Routes))}
	for _, n := range f.NICs {
		h.NICs = append(h.NICs, netchoice.NIC{Name: n.Name, Index: n.Index, Type: n.Type, Up: n.Up, SpeedMbps: n.SpeedMbps, Addrs: n.Addrs})
	}
	for _, r := range f.Routes {
		h.Routes = append(h.Routes, netchoice.Route{Peer: r.Peer, Addr: r.Addr, Iface: r.Iface, Err: r.Err})
	}
	for _, c := range f.HCAs {
		h.HCAs = append(h.HCAs, netchoice.HCA{Name: c.Name, Port: c.Port, State: c.State, LinkLayer: c.LinkLayer})
	}
	return h
}

// Route is how a host reaches one address of a peer: the kernel's answer
// to "ip route get Addr".
type Route struct {
	Peer    string `json:"peer"`              // the peer as named to the agent
	Addr    string `json:"addr,omitempty"`    // one address Peer resolved to
	Iface   string `json:"iface,omitempty"`   // outgoing interface; "" when unreachable
	Src     string `json:"src,omitempty"`     // preferred source address
	Gateway string `json:"gateway,omitempty"` // next hop, "" when on-link
	Err     string `json:"err,omitempty"`     // resolution or lookup failure
}

// NIC is one network interface.
type NIC struct {
	Name      string   `json:"name"`
	Index     int      `json:"index"`
	Type      string   `json:"type"` // netlink link type: device, veth, bridge, ipoib, loopback...
	Up        bool     `json:"up"`   // administratively up and running (carrier)
	MTU       int      `json:"mtu"`
	SpeedMbps int      `json:"speed_mbps,omitempty"` // 0 when unknown
	Addrs     []string `json:"addrs,omitempty"`      // CIDR, e.g. 198.18.0.2/24
	Master    string   `json:"master,omitempty"`     // bridge or bond this NIC is enslaved to
}

// HCA is one port of an InfiniBand or RoCE adapter.
type HCA struct {
	Name      string  `json:"name"` // mlx5_0
	Port      int     `json:"port"`
	State     string  `json:"state"`      // ACTIVE, DOWN... (text after "N: ")
	LinkLayer string  `json:"link_layer"` // InfiniBand or Ethernet
	RateGbps  float64 `json:"rate_gbps,omitempty"`
	Netdev    string  `json:"netdev,omitempty"` // ib0, enp1s0f0...
	NUMANode  int     `json:"numa_node"`        // -1 when unknown
}

// GPU is one NVIDIA GPU.
type GPU struct {
	Index    int    `json:"index"`
	UUID     string `json:"uuid,omitempty"`
	BusID    string `json:"bus_id,omitempty"`
	Name     string `json:"name,omitempty"`
	NUMANode int    `json:"numa_node"` // -1 when unknown
	// NUMAFrom says where NUMANode came from: "sysfs" (the PCI device's
	// numa_node) or "nvidia-smi" (topo -m's NUMA Affinity, where sysfs
	// says -1, as in VMs); empty when unknown or from an older agent.
	NUMAFrom string `json:"numa_from,omitempty"`
	// CPUs is the CPU list near the GPU (topo -m's CPU Affinity, "0-15");
	// empty when unknown.
	CPUs string `json:"cpus,omitempty"`
}

// Topo is the GPU interconnect matrix of `nvidia-smi topo -m`:
// Link[i][j] is the connection between GPU i and GPU j ("X", "NV12", "SYS"...).
type Topo struct {
	Link [][]string `json:"link"`
	// CPUs and NUMA are GPU i's CPU Affinity ("0-55,112-167", "" when not
	// shown) and NUMA Affinity (-1 when not shown) columns.
	CPUs []string `json:"cpus,omitempty"`
	NUMA []int    `json:"numa,omitempty"`
}

// StartJob hands an agent its share of a job. The agent prepares everything
// (PMI sockets, output pipes, working directories checked) and answers Ready;
// nothing runs until Go.
type StartJob struct {
	JobID string     `json:"job_id"`
	Ranks []RankSpec `json:"ranks"`
	// Env is what every rank of the job gets below its own RankSpec.Env,
	// sorted KEY=VALUE: the launcher's environment less host-specific
	// names (forwarded, as Hydra does) under what the launcher gives
	// every rank alike (the job's sizes and rendezvous, -mca, -x), sent
	// once per host rather than once per rank (it is most of a rank's
	// environment, and a big one times a host's ranks would fill the
	// frame).
	Env       []string      `json:"env,omitempty"`
	KillGrace time.Duration `json:"kill_grace"`
	// StdinRank is the global rank that receives the launcher's stdin, or -1.
	StdinRank int     `json:"stdin_rank"`
	PMI       *PMIJob `json:"pmi,omitempty"`
	// Bind is the CPU binding: none (default), numa, core, hwthread,
	// socket, socket:N (N consecutive local ranks per socket) or pe=N
	// (N consecutive CPUs per local rank). Agents that predate a form
	// refuse it as unknown.
	Bind string `json:"bind,omitempty"`
	// The compact form, sent to an agent whose facts say ExpandsStart
	// (Expand): the command and working directory of every rank whose
	// RankSpec has none, and HostEnv, what every rank of this host gets
	// beyond Env (the host's name and network variables, where they win
	// over Env), sent once per host rather than once per rank.
	Argv    []string `json:"argv,omitempty"`
	Dir     string   `json:"dir,omitempty"`
	HostEnv []string `json:"host_env,omitempty"`
	// Shared says this start is only this host's part (JobID, Ranks,
	// Argv, Dir, HostEnv): Env, KillGrace, StdinRank, PMI and Bind are
	// the job's shared start's, which came before it in a KindJob frame
	// (WithShared). The forwarded environment is most of a start's bytes;
	// so it crosses each link of the agent tree once, not once per host
	// behind it.
	Shared bool `json:"shared,omitempty"`
}

// RankSpec is one rank to run.
type RankSpec struct {
	Rank      int      `json:"rank"`
	LocalRank int      `json:"local_rank"`
	Argv      []string `json:"argv"`
	// Env is what the launcher sets for this rank beyond StartJob.Env,
	// sorted KEY=VALUE: its identity (RANK, PMI_RANK, ...), its GPUs, the
	// host's name and network variables; in the compact form only what
	// neither Place nor StartJob.HostEnv gives (its GPUs, TF_CONFIG).
	// The agent starts the rank from its own environment with, on top,
	// the identity of the SSH login it runs as (HOME, LOGNAME, SHELL,
	// USER), TORCHELASTIC_ERROR_FILE (a file of the rank's own) and
	// StartJob.Env; Env overrides all of those; PMI_FD, when the agent
	// serves PMI, overrides Env. Nothing else (package agent's rankEnv).
	Env  []string `json:"env"`
	Dir  string   `json:"dir,omitempty"`
	GPUs []int    `json:"gpus,omitempty"` // for NUMA binding
	// Place, in the compact form (StartJob.Expand), stands for the
	// rank's identity variables, which the agent builds from it
	// (Identity) instead of finding them in Env.
	Place *Place `json:"place,omitempty"`
}

// Place is where a rank sits in the job beyond its rank and local rank:
// what its identity variables are made of (Identity).
type Place struct {
	Node      int `json:"node"`       // its host's index among the hosts that run ranks
	LocalSize int `json:"local_size"` // the ranks on its host
	Cross     int `json:"cross"`      // its host's index among the hosts that run its local rank
	CrossSize int `json:"cross_size"` // the hosts that run its local rank
}

// PMIJob asks the agent to serve PMI to its ranks.
type PMIJob struct {
	KVSName string `json:"kvs_name"`
	Size    int    `json:"size"`
	Mapping string `json:"mapping"` // PMI_process_mapping
	// UniverseSize is what ranks are told the universe size is (PMI-1
	// universe_size, PMI-2 universeSize); 0 or less means unknown: -1,
	// and found=FALSE, as Hydra answers without -usize.
	UniverseSize int `json:"universe_size,omitempty"`
}

// Ready answers StartJob.
type Ready struct {
	Err string `json:"err,omitempty"`
}

// Started reports spawned ranks.
type Started struct {
	// Pids maps rank to its program's pid (also its process group's id),
	// under the job's supervisor where the agent runs one
	// (Facts.Containment).
	Pids map[int]int `json:"pids"`
	// Bindings are the CPUs each bound rank may run on ("0-3,8").
	Bindings map[int]string `json:"bindings,omitempty"`
}

// Exit reports the end of one rank.
type Exit struct {
	Rank   int `json:"rank"`
	Pid    int `json:"pid,omitempty"`    // as in Started.Pids
	Code   int `json:"code"`             // shell-style: 128+N for signal N, 127 not found
	Signal int `json:"signal,omitempty"` // the signal that killed it, 0 if none
	// SignalName is Signal's name ("SIGKILL"); empty when Signal is 0 or
	// the agent has no name for it.
	SignalName string `json:"signal_name,omitempty"`
	Err        string `json:"err,omitempty"` // spawn or PMI error, if any
	// Stopped is true when the rank ended because the launcher stopped it.
	Stopped bool `json:"stopped,omitempty"`
	// ErrorFile is what a failed rank wrote to its TORCHELASTIC_ERROR_FILE
	// (torch's @record: JSON with the exception and its traceback), at
	// most 64 KiB; empty when it wrote nothing.
	ErrorFile string `json:"error_file,omitempty"`
}

// Signal asks the agent to deliver a signal to every rank's process group.
type Signal struct {
	Name string `json:"name"` // TERM, KILL, INT, HUP, QUIT, USR1, USR2, CONT, STOP
}

// Stop asks the agent to end every rank: SIGTERM to each process group,
// SIGKILL after Grace.
type Stop struct {
	Grace time.Duration `json:"grace"`
}

// Fence is an agent's arrival at PMI barrier Seq: every local rank entered
// it. Puts are the key-value pairs its ranks put since the previous fence.
type Fence struct {
	Seq  int               `json:"seq"`
	Puts map[string]string `json:"puts,omitempty"`
}

// FenceDone completes barrier Seq on every host; Puts are every host's puts
// of that epoch, merged.
type FenceDone struct {
	Seq  int               `json:"seq"`
	Puts map[string]string `json:"puts,omitempty"`
}

// Name is a PMI name-service request (MPI_Publish_name, MPI_Lookup_name,
// MPI_Unpublish_name) from one of the agent's ranks. The launcher keeps
// the job's one table of names, so a name published on one host is found
// from every other, as under Hydra; it answers every request with a
// NameReply carrying the same ID, at once (a lookup of an unknown name is
// not waited for).
type Name struct {
	ID      uint64 `json:"id"` // the agent's, unique within its session
	Op      string `json:"op"` // NamePublish, NameUnpublish or NameLookup
	Service string `json:"service"`
	Port    string `json:"port,omitempty"` // NamePublish only
}

// Name operations.
const (
	NamePublish   = "publish"
	NameUnpublish = "unpublish"
	NameLookup    = "lookup"
)

// MaxNameLen bounds a Name's Service and Port (PMI-2's PMI2_MAX_VALLEN);
// an agent refuses longer ones itself, and a launcher takes them for a
// protocol violation.
const MaxNameLen = 1024

// NameReply answers the Name with the same ID.
type NameReply struct {
	ID     uint64 `json:"id"`
	Status string `json:"status"`         // NameOK, NameNotFound, NameExists or NameFull
	Port   string `json:"port,omitempty"` // a NameLookup's answer
}

// Name statuses.
const (
	NameOK       = "ok"
	NameNotFound = "not_found" // lookup or unpublish of a name not published
	NameExists   = "exists"    // publish of a name already published
	NameFull     = "full"      // publish refused: the job's table is full
)

// Abort is a rank's request to abort the whole job with Code.
type Abort struct {
	Rank int    `json:"rank"`
	Code int    `json:"code"`
	Msg  string `json:"msg,omitempty"`
}

// Error is a fatal session error.
type Error struct {
	Msg string `json:"msg"`
	// Stopped says the agent itself was stopped (a signal from its
	// service manager or container runtime) and stopped its ranks; Msg
	// says by what. It is no error of the session's, and the launcher
	// says Msg as it is. Older launchers ignore it.
	Stopped bool `json:"stopped,omitempty"`
}

// LastWords bounds how long an agent that is stopping gives a session to
// tell its launcher why (an Error with Stopped), and how long its SSH
// server keeps a connection with sessions open for it.
const LastWords = time.Second

// Why is how the launcher says why a host whose agent sent e was lost.
func (e Error) Why() string {
	if e.Stopped {
		return e.Msg
	}
	return "it reported an error: " + e.Msg
}

// Prepare asks for node preparation before StartJob.
type Prepare struct {
	DropCaches int `json:"drop_caches,omitempty"` // 1, 2 or 3; 0 = no
}

// Prepared answers Prepare.
type Prepared struct {
	Took time.Duration `json:"took"`
	Err  string        `json:"err,omitempty"`
}

// Probe asks the agent to open a TCP connection to each target (host:port).
type Probe struct {
	Targets []string      `json:"targets"`
	Timeout time.Duration `json:"timeout"`
}

// ProbeResult answers Probe, one entry per target, in order.
type ProbeResult struct {
	Results []ProbeOne `json:"results"`
}

// ProbeOne is the outcome of one dial.
type ProbeOne struct {
	Target string        `json:"target"`
	Took   time.Duration `json:"took"`
	Err    string        `json:"err,omitempty"`
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	neg := n < 0
	if neg {
		n = -n
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// Dump asks the agent for every local rank's stacks, before anything is
// stopped: native stacks with gdb where it is installed. With Abort (the
// job is stopped next), the agent may also end ranks in ways that print
// their stacks: SIGABRT to Python (faulthandler, PYTHONFAULTHANDLER=1),
// SIGQUIT to Go programs. Within is how long the launcher waits for the
// answer: the agent answers before then with what it has, and ends what
// it started for the dump (zero: the agent's own default).
type Dump struct {
	Abort  bool          `json:"abort,omitempty"`
	Within time.Duration `json:"within,omitempty"`
}

// Dumped answers Dump: each local rank's stacks as text (gdb's output,
// then whatever the rank printed on stderr after an abort), bounded by
// MaxStacks per rank; Tools says what was used ("gdb", "faulthandler"...).
type Dumped struct {
	Stacks map[int]string `json:"stacks"`
	Tools  []string       `json:"tools,omitempty"`
}

// MaxStacks bounds one rank's stacks in Dumped.
const MaxStacks = 1 << 20
