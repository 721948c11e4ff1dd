//go:build linux

// Package hostnet tests the launcher's host networking on network-namespace
// hosts: the per-host data interface and the environment it yields
// (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, HOROVOD_GLOO_IFACE,
// MASTER_ADDR), a real python3-torch Gloo all_reduce across hosts, the
// reachability preflight, --drop-caches, and --inspect, all with real
// `agent` processes in the namespaces and the real `launcher` binary in
// the root namespace. It has only tests.
//
// Every host has a dead-end "management" NIC (eno1, 198.19.S.0/24, lower
// interface index, reaches nothing) and a data NIC named differently per
// host (enp1s0f0 on host 0, eth2 on host 1): the setting where NCCL's and
// Gloo's defaults pick the wrong NIC and horovodrun's name intersection
// fails.
//
// Names and addresses: namespace prefixes gwh0..gwh9, data subnets
// 198.18.170-179.0/24 (dead-end 198.19.170-179.0/24); nothing else is
// touched, so the package runs beside other packages' beds.
package hostnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed/roottest"
)

// jobTimeout bounds one launcher run; 2 shared cores, often busy.
const jobTimeout = 120 * time.Second

// agentPort is where netns agents listen, as in production.
const agentPort = 22122

func TestMain(m *testing.M) {
	e2e.DefaultSignals()
	code := m.Run()
	e2e.RemoveBinaries()
	os.Exit(code)
}

// binaries builds bin/agent and bin/launcher once per test process
// (e2e.BuildBinaries; TestMain removes them).
func binaries(t *testing.T) (agentBin, launcherBin string) {
	t.Helper()
	launcherBin, agentBin = e2e.BuildBinaries(t)
	return agentBin, launcherBin
}

// dataNIC names host i's data interface: the hosts disagree on purpose.
func dataNIC(i int) string {
	if i == 1 {
		return "eth2"
	}
	return testbed.DefaultDataNIC
}

// newBed builds a bed of n hosts with dead-end NICs and differently named
// data NICs, closed and checked when the test ends, even on failure.
func newBed(t *testing.T, prefix string, subnet, n int) *testbed.Bed {
	t.Helper()
	roottest.RequireRoot(t)
	b, err := testbed.New(t.Context(), testbed.Options{
		Prefix: prefix, Hosts: n, Subnet: subnet, DeadEnd: true, DataNIC: dataNIC, Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("bed Close: %v", err)
		}
	})
	return b
}

// cluster is a bed with keys and a known_hosts file for its agents.
type cluster struct {
	bed        *testbed.Bed
	hosts      []testbed.Host
	keys       sshtest.Keys
	knownHosts string
}

func newCluster(t *testing.T, prefix string, subnet, n int) *cluster {
	t.Helper()
	b := newBed(t, prefix, subnet, n)
	keys, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{bed: b, hosts: b.Hosts(), keys: keys}
	var addrs []string
	for _, h := range c.hosts {
		addrs = append(addrs, h.Addr)
	}
	// One known_hosts line per address and port the tests use.
	kh := keys.KnownHosts(addrs, agentPort) + keys.KnownHosts(addrs, agentPort+1)
	c.knownHosts = filepath.Join(keys.Dir, "known_hosts")
	if err := os.WriteFile(c.knownHosts, []byte(kh), 0o644); err != nil {
		t.Fatal(err)
	}
	return c
}

// startAgent runs a real agent in host i's namespace, listening on the
// host's data address and port, named h<i>, with extra options, and waits
// for its SSH banner.
func (c *cluster) startAgent(t *testing.T, i, port int, extra ...string) *testbed.Proc {
	t.Helper()
	agentBin, _ := binaries(t)
	h := c.hosts[i]
	addr := net.JoinHostPort(h.Addr, strconv.Itoa(port))
	args := append([]string{"--listen", addr, "--host-key", c.keys.HostKey, "--authorized-keys", c.keys.AuthorizedKeys,
		"--name", "h" + strconv.Itoa(i), "--log-format", "console"}, extra...)
	p, err := c.bed.Start(t.Context(), i, agentBin, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent h%d on %s (%s) output:\n%s", i, addr, p, e2e.Tail(p.Output(), 4000))
		}
	})
	waitBanner(t, addr, p)
	return p
}

// startAgents starts the default agent (port agentPort) on every host and
// returns them by host index.
func (c *cluster) startAgents(t *testing.T) []*testbed.Proc {
	t.Helper()
	var ps []*testbed.Proc
	for i := range c.hosts {
		ps = append(ps, c.startAgent(t, i, agentPort))
	}
	return ps
}

// waitOnlyAgents waits until each host's namespace holds nothing but its
// agent (`ip netns pids`): every rank of the last job is gone.
func (c *cluster) waitOnlyAgents(t *testing.T, agents []*testbed.Proc) {
	t.Helper()
	c.waitOnlyLiveAgents(t, agents)
}

// waitOnlyLiveAgents is waitOnlyAgents where a nil agent is one that was
// killed: its host must hold nothing at all.
func (c *cluster) waitOnlyLiveAgents(t *testing.T, agents []*testbed.Proc) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for i, h := range c.hosts {
		for {
			out, err := exec.CommandContext(t.Context(), "ip", "netns", "pids", h.NS).Output()
			if err != nil {
				t.Fatalf("ip netns pids %s: %v", h.NS, err)
			}
			var left []string
			for _, f := range strings.Fields(string(out)) {
				if agents[i] == nil || f != strconv.Itoa(agents[i].Pid) {
					comm, _ := os.ReadFile("/proc/" + f + "/comm")
					left = append(left, f+" ("+strings.TrimSpace(string(comm))+")")
				}
			}
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("host %d (%s): processes left besides the agent: %v", i, h.NS, left)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// conn returns the launcher's connection options for the given -H list.
func (c *cluster) conn(hosts string) []string {
	return []string{"-i", c.keys.ClientKey, "--known-hosts", c.knownHosts, "-H", hosts}
}

// hostList returns "addr:slots,..." for hosts 0..n-1.
func (c *cluster) hostList(slots int) string {
	var s []string
	for _, h := range c.hosts {
		s = append(s, h.Addr+":"+strconv.Itoa(slots))
	}
	return strings.Join(s, ",")
}

// waitBanner waits until addr answers with an SSH banner (testbed.WaitSSH).
func waitBanner(t *testing.T, addr string, p *testbed.Proc) {
	t.Helper()
	if err := testbed.WaitSSH(t.Context(), addr, p, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// launch is one run of the launcher binary.
type launch struct {
	stdout, stderr bytes.Buffer
	code           int
	took           time.Duration
}

func (l *launch) String() string {
	return fmt.Sprintf("exit code %d after %v\nstdout:\n%s\nstderr:\n%s", l.code, l.took.Round(time.Millisecond), e2e.Tail(l.stdout.String(), 4000), e2e.Tail(l.stderr.String(), 6000))
}

// runLauncher runs bin/launcher with args in the root namespace, in its
// own process group, until it exits or jobTimeout passes (then the group
// is killed and the test fails).
func runLauncher(t *testing.T, args ...string) *launch {
	t.Helper()
	_, launcherBin := binaries(t)
	l := &launch{}
	ctx, cancel := context.WithTimeout(t.Context(), jobTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, launcherBin, args...)
	cmd.Stdout, cmd.Stderr = &l.stdout, &l.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	t0 := time.Now()
	err := cmd.Run()
	l.took = time.Since(t0)
	if cmd.Process != nil {
		// The launcher is gone; only its own group is signalled.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("launcher still running after %v; killed.\n%v", jobTimeout, l)
	case errors.As(err, &ee):
		l.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run launcher: %v", err)
	}
	return l
}

// rankScript is a shell program that leaves a mark in dir (ran.<RANK>)
// then runs cmd: how the tests tell whether any rank started.
func rankScript(dir, cmd string) []string {
	return []string{"/bin/sh", "-c", `touch "$0/ran.$RANK" && ` + cmd, dir}
}

// noneRan fails the test if any rank left its mark in dir.
func noneRan(t *testing.T, dir string) {
	t.Helper()
	marks, err := filepath.Glob(filepath.Join(dir, "ran.*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(marks) > 0 {
		t.Errorf("ranks ran although the job must not have started: %v", marks)
	}
}

// ranks counts the marks rankScript left in dir.
func ranks(t *testing.T, dir string) int {
	t.Helper()
	marks, err := filepath.Glob(filepath.Join(dir, "ran.*"))
	if err != nil {
		t.Fatal(err)
	}
	return len(marks)
}
