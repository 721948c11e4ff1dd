package slurmbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gangway-hpc/gangway/cmd/internal/procscan"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
	"github.com/gangway-hpc/gangway/internal/osproc"
)

// Options describes a bed.
type Options struct {
	// Prefix names the bed's namespaces and links (testbed.Options.Prefix):
	// "gw", one letter and up to two digits, e.g. "gws0"; each user of the
	// machine has its own letter.
	Prefix string
	// Subnet selects 198.18.<Subnet>.0/24, 1 to 250 (190 to 199 for the
	// shared beds; each user of the machine has its own).
	Subnet int
	// Nodes is the number of compute nodes, 1 to 64.
	Nodes int
	// CPUs is each node's CPU count as slurm.conf declares it; 0 means 8.
	CPUs int
	// LocalNamesOnly gives each node a hosts file that names only the
	// controller and the node itself, as on clusters whose NodeName is no
	// DNS name (cloud and container clusters, NodeAddr != NodeName): a
	// node's name then resolves nowhere but on that node.
	LocalNamesOnly bool
	// Logf, if set, receives progress messages.
	Logf func(format string, args ...any)
}

// Node is one compute node.
type Node struct {
	Name string // cn1, cn2...
	Addr string // 198.18.<Subnet>.<i+1>
	NS   string // its network namespace
	Host int    // its testbed host index (1..N)
}

// Bed is a running cluster.
type Bed struct {
	net     *testbed.Bed
	dir     string
	conf    string
	ctlName string
	// localNames: each node's hosts file names only the controller and
	// itself (Options.LocalNamesOnly).
	localNames bool
	nodes      []Node
	slurmd     map[string]*testbed.Proc
	logf       func(format string, args ...any)
	bgCtx      context.Context
}

// Binaries are the programs a bed needs, all from Debian's slurmctld,
// slurmd, slurm-client and munge packages (and util-linux).
var Binaries = []string{"slurmctld", "slurmd", "srun", "salloc", "sbatch", "scancel", "scontrol", "sinfo", "squeue", "munged", "mungekey", "munge", "unmunge", "unshare", "mount"}

// Packages are the Debian packages that hold Binaries (the Makefile's
// TEST_PKGS installs them).
var Packages = []string{"slurmctld", "slurmd", "slurm-client", "munge"}

// Usable reports why a bed cannot be built here: network namespaces are
// not usable (testbed.Usable: not root...) or programs are missing.
func Usable() error {
	if err := testbed.Usable(); err != nil {
		return err
	}
	return Installed()
}

// Installed reports which of Binaries are missing.
func Installed() error {
	var missing []string
	for _, b := range Binaries {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("Slurm is not installed (missing %s; Debian: apt-get install %s, or make deps)", strings.Join(missing, ", "), strings.Join(Packages, " "))
	}
	return nil
}

var prefixRE = regexp.MustCompile(`^gw[a-z][0-9]{0,2}$`)

// New builds and starts a bed, and checks it with one srun over every
// node. On failure it removes whatever it had made; the error carries the
// daemons' log tails.
func New(ctx context.Context, o Options) (*Bed, error) {
	switch {
	case !prefixRE.MatchString(o.Prefix):
		return nil, fmt.Errorf("slurmbed: prefix %q: want \"gw\", a letter and up to two digits", o.Prefix)
	case o.Subnet < 1 || o.Subnet > 250:
		return nil, fmt.Errorf("slurmbed %s: subnet %d: want 1..250", o.Prefix, o.Subnet)
	case o.Nodes < 1 || o.Nodes > 64:
		return nil, fmt.Errorf("slurmbed %s: %d nodes: want 1..64", o.Prefix, o.Nodes)
	}
	if o.CPUs == 0 {
		o.CPUs = 8
	}
	if err := Usable(); err != nil {
		return nil, fmt.Errorf("slurmbed %s: %w", o.Prefix, err)
	}
	b := &Bed{ctlName: o.Prefix + "ctl", localNames: o.LocalNamesOnly, logf: o.Logf, slurmd: map[string]*testbed.Proc{}, bgCtx: context.WithoutCancel(ctx)}
	if b.logf == nil {
		b.logf = func(string, ...any) {}
	}
	t0 := time.Now()
	if err := b.build(ctx, o); err != nil {
		err = fmt.Errorf("slurmbed %s: %w%s", o.Prefix, err, b.logTails())
		if cerr := b.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, err
	}
	b.logf("slurmbed %s: %d nodes on 198.18.%d.0/24 up in %v (SLURM_CONF=%s)", o.Prefix, o.Nodes, o.Subnet, time.Since(t0).Round(time.Millisecond), b.conf)
	return b, nil
}

func (b *Bed) build(ctx context.Context, o Options) error {
	var err error
	if b.dir, err = os.MkdirTemp("", "gangway-slurmbed-"+o.Prefix+"-"); err != nil {
		return err
	}
	// munged wants its socket's directory, and every directory above it,
	// readable by all and writable only by its owner (or sticky, as /tmp).
	for _, d := range []string{"", "munge", "state", "run", "log", "spool", "tmp"} {
		if err := os.MkdirAll(filepath.Join(b.dir, d), 0o755); err != nil {
			return err
		}
		if err := os.Chmod(filepath.Join(b.dir, d), 0o755); err != nil {
			return err
		}
	}
	if b.net, err = testbed.New(ctx, testbed.Options{Prefix: o.Prefix, Hosts: o.Nodes + 1, Subnet: o.Subnet, Logf: o.Logf}); err != nil {
		return err
	}
	hosts := b.net.Hosts()
	for i := 1; i <= o.Nodes; i++ {
		n := Node{Name: "cn" + strconv.Itoa(i), Addr: hosts[i].Addr, NS: hosts[i].NS, Host: i}
		b.nodes = append(b.nodes, n)
		for _, d := range []string{"spool", "tmp"} {
			if err := os.MkdirAll(filepath.Join(b.dir, d, n.Name), 0o755); err != nil {
				return err
			}
		}
	}
	b.conf = filepath.Join(b.dir, "slurm.conf")
	files := map[string]string{
		"slurm.conf":     b.slurmConf(hosts[0].Addr, o.CPUs),
		"cgroup.conf":    cgroupConf,
		"plugstack.conf": "",
		"hosts":          b.hostsFile(hosts[0].Addr, nil),
	}
	for _, n := range b.nodes {
		if b.localNames {
			files["hosts."+n.Name] = b.hostsFile(hosts[0].Addr, &n)
		}
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(b.dir, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	if err := b.startMunge(ctx); err != nil {
		return err
	}
	if _, err := b.daemon(ctx, 0, b.ctlName, b.hostsPath(""), "slurmctld", "-D", "-i", "-f", b.conf); err != nil {
		return err
	}
	if err := b.waitFor(ctx, 20*time.Second, "slurmctld", func() bool {
		out, err := b.run(ctx, 5*time.Second, "scontrol", "ping")
		return err == nil && strings.Contains(out, "is UP")
	}); err != nil {
		return err
	}
	for _, n := range b.nodes {
		p, err := b.daemon(ctx, n.Host, n.Name, b.hostsPath(n.Name), "slurmd", "-D", "-f", b.conf, "-N", n.Name)
		if err != nil {
			return err
		}
		b.slurmd[n.Name] = p
	}
	if err := b.WaitIdle(ctx, 60*time.Second); err != nil {
		return err
	}
	return b.check(ctx)
}

// slurmConf is the cluster's configuration (see the package doc).
func (b *Bed) slurmConf(ctlAddr string, cpus int) string {
	var s strings.Builder
	d := b.dir
	fmt.Fprintf(&s, `# gangway slurmbed
ClusterName=gangway
SlurmctldHost=%s(%s)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=%s/munge/munge.socket
StateSaveLocation=%s/state
SlurmdSpoolDir=%s/spool/%%n
TmpFS=%s/tmp/%%n
SlurmctldPidFile=%s/run/slurmctld.pid
SlurmdPidFile=%s/run/slurmd.%%n.pid
SlurmctldLogFile=%s/log/slurmctld.log
SlurmdLogFile=%s/log/slurmd.%%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=%s/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
MinJobAge=10
KillWait=3
Waittime=0
MailProg=/bin/true
`, b.ctlName, ctlAddr, d, d, d, d, d, d, d, d, d)
	for _, n := range b.nodes {
		fmt.Fprintf(&s, "NodeName=%s NodeAddr=%s NodeHostname=%s CPUs=%d State=UNKNOWN\n", n.Name, n.Addr, n.Name, cpus)
	}
	// A second partition of the same nodes whose jobs preempt the bed's
	// (cancelling them), as a cluster's urgent or owner partition does
	// to its preemptible one; nothing runs there unless a test asks.
	s.WriteString("PreemptType=preempt/partition_prio\nPreemptMode=CANCEL\n")
	s.WriteString("PartitionName=bed Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1\n")
	s.WriteString("PartitionName=urgent Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=2\n")
	return s.String()
}

// cgroupConf: slurmd 22.05 always initialises a cgroup plugin, even with
// proctrack/linuxproc and task/none; "autodetect" fails inside ip netns
// exec (it remounts /sys, so nothing is mounted on /sys/fs/cgroup). Naming
// cgroup/v1 skips the detection; no plugin here uses cgroups, so nothing
// is created or mounted.
const cgroupConf = "CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n"

// hostsFile names the controller and every node (only, when only is
// not nil), for the daemons' (and so the agents' and ranks') /etc/hosts.
func (b *Bed) hostsFile(ctlAddr string, only *Node) string {
	var s strings.Builder
	s.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	fmt.Fprintf(&s, "%s\t%s\n", ctlAddr, b.ctlName)
	for _, n := range b.nodes {
		if only == nil || n.Name == only.Name {
			fmt.Fprintf(&s, "%s\t%s\n", n.Addr, n.Name)
		}
	}
	return s.String()
}

// hostsPath is the hosts file of node ("": the controller).
func (b *Bed) hostsPath(node string) string {
	if node != "" && b.localNames {
		return filepath.Join(b.dir, "hosts."+node)
	}
	return filepath.Join(b.dir, "hosts")
}

// daemonScript gives the daemon its hostname (in a new UTS namespace) and
// the bed's hosts file (bind-mounted in a new mount namespace whose mounts
// are private: nothing propagates to the machine's), then becomes the
// daemon, so the tracked PID is the daemon's.
const daemonScript = `hostname "$1" && mount --bind "$2" /etc/hosts && shift 2 && exec "$@"`

// daemon starts a Slurm daemon in host's namespaces (see daemonScript)
// with hosts over /etc/hosts, tracked by the testbed.
func (b *Bed) daemon(ctx context.Context, host int, hostname, hosts string, argv ...string) (*testbed.Proc, error) {
	args := append([]string{"--uts", "--mount", "--propagation", "private", "/bin/sh", "-c", daemonScript, "sh", hostname, hosts}, argv...)
	cmd := b.net.Command(b.bgCtx, host, "unshare", args...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+b.conf)
	return b.net.StartCmd(cmd)
}

// startMunge makes the key and starts munged (in the controller's
// namespace; its socket is a file every namespace reaches), and waits
// until a credential round-trips.
func (b *Bed) startMunge(ctx context.Context) error {
	m := filepath.Join(b.dir, "munge")
	key := filepath.Join(m, "munge.key")
	if out, err := exec.CommandContext(ctx, "mungekey", "-c", "-b", "1024", "-k", key).CombinedOutput(); err != nil {
		return fmt.Errorf("mungekey: %w: %s", err, out)
	}
	if err := os.Chmod(key, 0o600); err != nil {
		return err
	}
	sock := b.mungeSocket()
	if _, err := b.net.Start(b.bgCtx, 0, "munged", "-F", "--socket="+sock, "--key-file="+key,
		"--pid-file="+filepath.Join(m, "munged.pid"), "--log-file="+filepath.Join(b.dir, "log", "munged.log"),
		"--seed-file="+filepath.Join(m, "munged.seed"), "--num-threads=4"); err != nil {
		return err
	}
	return b.waitFor(ctx, 10*time.Second, "munged", func() bool {
		enc, err := exec.CommandContext(ctx, "munge", "-S", sock, "-n").Output()
		if err != nil {
			return false
		}
		dec := exec.CommandContext(ctx, "unmunge", "-S", sock)
		dec.Stdin = bytes.NewReader(enc)
		return dec.Run() == nil
	})
}

func (b *Bed) mungeSocket() string { return filepath.Join(b.dir, "munge", "munge.socket") }

// WaitIdle waits until every node is idle (after a test's jobs have ended
// and their resources are released).
func (b *Bed) WaitIdle(ctx context.Context, timeout time.Duration) error {
	return b.waitFor(ctx, timeout, fmt.Sprintf("%d idle nodes", len(b.nodes)), func() bool {
		out, err := b.run(ctx, 10*time.Second, "sinfo", "-h", "-N", "-p", "bed", "-o", "%N %t")
		return err == nil && strings.Count(out, " idle\n") == len(b.nodes)
	})
}

// check runs `srun -N <all> hostname` and expects every node's name once.
func (b *Bed) check(ctx context.Context) error {
	n := strconv.Itoa(len(b.nodes))
	out, err := b.run(ctx, 60*time.Second, "srun", "-N", n, "-n", n, "--ntasks-per-node=1", "hostname")
	if err != nil {
		return fmt.Errorf("check srun -N %s hostname: %w: %s", n, err, out)
	}
	got := strings.Fields(out)
	slices.Sort(got)
	var want []string
	for _, nd := range b.nodes {
		want = append(want, nd.Name)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return fmt.Errorf("check srun -N %s hostname: printed %q, want %q", n, got, want)
	}
	return nil
}

// waitFor polls ok every 100 ms until it holds or timeout passes.
func (b *Bed) waitFor(ctx context.Context, timeout time.Duration, what string, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if ok() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// run runs a Slurm command in the root namespace against the bed, bounded
// by timeout, and returns its combined output.
func (b *Bed) run(ctx context.Context, timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := b.Command(ctx, name, args...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Command runs a Slurm client (srun, salloc, sbatch, scancel, scontrol,
// squeue...) or anything that calls one in the root namespace, against
// the bed (SLURM_CONF in its environment), in its own process group;
// ctx's end kills the group.
func (b *Bed) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), b.Env()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return osproc.KillGroup(cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Env is what Slurm's commands need to use the bed.
func (b *Bed) Env() []string { return []string{"SLURM_CONF=" + b.conf} }

// Conf is the bed's slurm.conf.
func (b *Bed) Conf() string { return b.conf }

// Dir is the bed's state directory.
func (b *Bed) Dir() string { return b.dir }

// Nodes are the compute nodes, cn1 first.
func (b *Bed) Nodes() []Node { return slices.Clone(b.nodes) }

// SlurmdPid is the PID of node's slurmd, 0 if unknown.
func (b *Bed) SlurmdPid(node string) int {
	if p := b.slurmd[node]; p != nil {
		return p.Pid
	}
	return 0
}

// Logs are the tails of the daemons' log files, for failure messages.
func (b *Bed) Logs() string { return b.logTails() }

func (b *Bed) logTails() string {
	if b.dir == "" {
		return ""
	}
	files, _ := filepath.Glob(filepath.Join(b.dir, "log", "*"))
	var s strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil || len(data) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		fmt.Fprintf(&s, "\n== %s\n%s", filepath.Base(f), strings.Join(lines[max(0, len(lines)-12):], "\n"))
	}
	return s.String()
}

// Close stops and removes everything of the bed and checks that nothing
// is left (see the package doc). It is idempotent.
func (b *Bed) Close() error {
	var errs []error
	if b.net != nil {
		if err := b.net.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if b.conf != "" {
		if left := b.leftovers(); len(left) > 0 {
			errs = append(errs, fmt.Errorf("processes still using the bed, killed: %s", strings.Join(left, ", ")))
		}
	}
	if b.dir != "" {
		if err := os.RemoveAll(b.dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("slurmbed: close: %w", err)
	}
	return nil
}

// leftovers finds, kills (by PID) and names the processes whose
// environment still points at the bed: Slurm commands or launchers that
// outlived it.
func (b *Bed) leftovers() []string {
	var left []string
	ps := slices.DeleteFunc(procscan.Tagged("SLURM_CONF="+b.conf), func(p procscan.Info) bool { return p.Pid == os.Getpid() })
	for _, p := range ps {
		left = append(left, fmt.Sprintf("pid %d (%s)", p.Pid, p.Comm))
	}
	procscan.Kill(ps)
	return left
}
