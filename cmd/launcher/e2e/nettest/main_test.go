// Package nettest holds gangway's integration tests with real processes on
// several hosts: in-process agents on loopback addresses, and real `agent`
// processes in network-namespace hosts (cmd/internal/testbed), driven by
// the real `launcher`, by Open MPI's `mpirun` and by OpenSSH. It has only
// tests.
//
// Names and addresses: namespace prefixes gwn0..gwn9, data subnets
// 198.18.180-189.0/24, and for the MPICH compatibility tests (the PMI
// differential test, the name service) gwm0..gwm5 on 198.18.200-205.0/24,
// for the mpi-operator pods gwo0 on 198.18.210.0/24, for the fabric
// self-test gwz0 on 198.18.80.0/24, for the health checks gwy0-gwy2 on
// 198.18.70-72.0/24, for ~/.ssh/config and jump hosts gwj0 on
// 198.18.30.0/24;
// loopback agents come from cmd/internal/e2e (their own 127.0.B.x block,
// ephemeral ports). Nothing else is touched, so the package can run
// beside other packages' beds.
//
// "Nothing left running" is checked without ps: every job gets a unique
// tag in its ranks' environment (-x GANGWAY_NETTEST_TAG=<tag> for the
// launcher, the same variable exported to mpirun's ranks), and
// taggedProcs scans /proc/*/environ for it. A process's environ is its
// initial environment, so the tag marks every rank and every child a rank
// starts. For Open MPI's daemons (whose environment does not carry the
// tag) the namespace's own process list (`ip netns pids`) must be the
// agent alone.
//
// Each namespace host's agent gets a /tmp of its own (TMPDIR): the hosts
// share one file system and one hostname, and Open MPI's daemons of one
// job otherwise collide in $TMPDIR/ompi.<hostname>.<uid>/ (see
// startAgents).
package nettest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/agent/proc"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed/roottest"
)

// jobTimeout bounds one MPI job or launcher run: 2 shared cores run up to
// 16 busy-polling ranks.
const jobTimeout = 90 * time.Second

// tagEnv marks every process a test's job starts (see the package doc).
const tagEnv = "GANGWAY_NETTEST_TAG"

// helperEnv switches the test binary into a helper mode (see helperMain),
// so ranks can do small network tasks without python or nc.
const helperEnv = "GANGWAY_NETTEST_HELPER"

var binDir string // temp dir for built binaries, made in TestMain

func TestMain(m *testing.M) {
	if code, ok := proc.Supervise(os.Args); ok { // in-process agents' rank supervisors
		os.Exit(code)
	}
	e2e.HelperMain() // an isolated rank, or a careless parent of an agent
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode))
	}
	dir, err := os.MkdirTemp("", "gangway-nettest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// World-readable: a stock sshd session and netns hosts run binaries
	// from here (all as root, but keep it plain).
	_ = os.Chmod(dir, 0o755)
	binDir = dir
	e2e.DefaultSignals()
	code := m.Run()
	e2e.RemoveBinaries()
	os.RemoveAll(dir)
	os.Exit(code)
}

// built is the result of one build, shared by every test of the process.
type built struct {
	once sync.Once
	path string
	err  error
}

func (b *built) get(t *testing.T, what string, build func() (string, error)) string {
	t.Helper()
	b.once.Do(func() {
		t0 := time.Now()
		b.path, b.err = build()
		if b.err == nil {
			t.Logf("built %s in %v", what, time.Since(t0).Round(time.Millisecond))
		}
	})
	if b.err != nil {
		t.Fatalf("build %s: %v", what, b.err)
	}
	return b.path
}

var mpichTest, ompiHello built

// binaries builds bin/agent and bin/launcher once per test process
// (e2e.BuildBinaries; TestMain removes them).
func binaries(t *testing.T) (agentBin, launcherBin string) {
	t.Helper()
	launcherBin, agentBin = e2e.BuildBinaries(t)
	return agentBin, launcherBin
}

// compileMPI compiles src with the MPI compiler wrapper cc (mpicc.mpich or
// mpicc.openmpi) once per process, or skips when cc is not installed.
func compileMPI(t *testing.T, b *built, cc, src, name string) string {
	t.Helper()
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("%s not found (install Debian's mpich/libmpich-dev or openmpi-bin/libopenmpi-dev)", cc)
	}
	return b.get(t, name, func() (string, error) {
		out := filepath.Join(binDir, name)
		if b, err := exec.Command(cc, "-O2", "-Wall", "-o", out, src).CombinedOutput(); err != nil {
			return "", fmt.Errorf("%s: %w\n%s", cc, err, b)
		}
		return out, nil
	})
}

// newTag returns a unique job tag.
func newTag(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "nettest-" + hex.EncodeToString(b[:])
}

// bed builds a namespace bed that is closed, and checked, when the test
// ends (even on failure).
func newBed(t *testing.T, o testbed.Options) *testbed.Bed {
	t.Helper()
	roottest.RequireRoot(t)
	o.Logf = t.Logf
	t0 := time.Now()
	b, err := testbed.New(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bed %s: %d hosts in %v", o.Prefix, o.Hosts, time.Since(t0).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("bed Close: %v", err)
		}
	})
	return b
}

// agentPort is where netns agents listen, as in production.
const agentPort = 22122

// agentBed is a bed whose every host runs an agent, with a client key
// they trust and a known_hosts file that knows them.
type agentBed struct {
	*testbed.Bed
	hosts      []testbed.Host
	agents     map[int]*testbed.Proc
	keys       sshtest.Keys
	knownHosts string
}

// newAgentBed builds a bed of o.Hosts hosts and starts an agent on each.
func newAgentBed(t *testing.T, o testbed.Options) *agentBed {
	t.Helper()
	b := newBed(t, o)
	keys, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ab := &agentBed{Bed: b, hosts: b.Hosts(), keys: keys}
	idx := make([]int, len(ab.hosts))
	addrs := make([]string, len(ab.hosts))
	for i, h := range ab.hosts {
		idx[i], addrs[i] = i, h.Addr
	}
	ab.agents = startAgents(t, b, keys, idx...)
	if ab.knownHosts, err = keys.WriteKnownHosts(addrs, agentPort); err != nil {
		t.Fatal(err)
	}
	return ab
}

// startAgents runs a real agent in each given host of b, listening on the
// host's data address, named h<i>, and waits until each answers with an
// SSH banner. It returns the agents' processes by host index.
func startAgents(t *testing.T, b *testbed.Bed, keys sshtest.Keys, hosts ...int) map[int]*testbed.Proc {
	t.Helper()
	return startAgentsWith(t, b, keys, nil, hosts...)
}

// startAgentsWith is startAgents with extra agent flags.
func startAgentsWith(t *testing.T, b *testbed.Bed, keys sshtest.Keys, extra []string, hosts ...int) map[int]*testbed.Proc {
	t.Helper()
	return startAgentsEnv(t, b, keys, extra, nil, hosts...)
}

// startAgentsEnv is startAgentsWith with env added to the agents'
// environment (after TMPDIR, so it may replace it).
func startAgentsEnv(t *testing.T, b *testbed.Bed, keys sshtest.Keys, extra, env []string, hosts ...int) map[int]*testbed.Proc {
	t.Helper()
	agentBin, _ := binaries(t)
	procs := map[int]*testbed.Proc{}
	for _, i := range hosts {
		h := b.Hosts()[i]
		cmd := b.Command(t.Context(), i, agentBin, append([]string{
			"--listen", h.Addr + ":" + strconv.Itoa(agentPort),
			"--host-key", keys.HostKey, "--authorized-keys", keys.AuthorizedKeys,
			"--name", "h" + strconv.Itoa(i), "--log-format", "console"}, extra...)...)
		// A /tmp of its own, as a real host has: Open MPI's daemons keep
		// their session directory in $TMPDIR/ompi.<hostname>.<uid>/, and
		// every namespace host has the same hostname; in one shared /tmp
		// the daemons of one job race to create the same directories
		// ("mkdir ... File exists", orte_init fails) and share the same
		// hwloc topology file (orted dies of SIGSEGV in
		// hwloc_shmem_topology_write). Under binDir, removed at exit,
		// after every bed's processes are gone.
		tmp, err := os.MkdirTemp(binDir, h.NS+"-tmp-")
		if err != nil {
			t.Fatal(err)
		}
		cmd.Env = append(append(os.Environ(), "TMPDIR="+tmp), env...)
		p, err := b.StartCmd(cmd)
		if err != nil {
			t.Fatal(err)
		}
		procs[i] = p
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("agent h%d (%s) output:\n%s", i, p, e2e.Tail(p.Output(), 4000))
			}
		})
	}
	for _, i := range hosts {
		waitBanner(t, b.Hosts()[i].Addr+":"+strconv.Itoa(agentPort), procs[i])
	}
	return procs
}

// waitBanner waits until addr answers with an SSH banner (testbed.WaitSSH).
func waitBanner(t *testing.T, addr string, p *testbed.Proc) {
	t.Helper()
	if err := testbed.WaitSSH(t.Context(), addr, p, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// launch is one run of a command (the launcher, mpirun) in the root
// namespace, in its own process group, with its output kept.
type launch struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan struct{}
	code           int // exit code, set before done is closed
	start          time.Time
	took           time.Duration
}

// start starts name with args (env added to the test's environment).
// When the test ends, a launch still running is killed with its process
// group and every descendant (found through /proc before the kill, killed
// by PID), so a child that made its own process group (mpirun under
// launcher --mpi=openmpi) goes too.
func start(t *testing.T, env []string, name string, args ...string) *launch {
	t.Helper()
	return startTo(t, nil, env, name, args...)
}

// startDiscarding is start with the launch's stdout going to /dev/null
// (l.stdout stays empty): for ranks that write more than a test should
// keep, hundreds of megabytes.
func startDiscarding(t *testing.T, env []string, name string, args ...string) *launch {
	t.Helper()
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { null.Close() })
	return startTo(t, null, env, name, args...)
}

// startTo is start with stdout going to w, or to l.stdout when w is nil.
func startTo(t *testing.T, w io.Writer, env []string, name string, args ...string) *launch {
	t.Helper()
	l := &launch{name: filepath.Base(name), done: make(chan struct{})}
	l.cmd = exec.Command(name, args...)
	l.cmd.Env = append(os.Environ(), env...)
	l.cmd.Stdout, l.cmd.Stderr = &l.stdout, &l.stderr
	if w != nil {
		l.cmd.Stdout = w
	}
	l.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	l.cmd.WaitDelay = 5 * time.Second
	l.start = time.Now()
	if err := l.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { // owned by the cleanup below, which waits for done
		err := l.cmd.Wait()
		l.took = time.Since(l.start)
		l.code = l.cmd.ProcessState.ExitCode()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			l.code = -2
		}
		close(l.done)
	}()
	t.Cleanup(func() { l.kill() })
	return l
}

// kill ends a launch that is still running, with its descendants, and
// waits for it.
func (l *launch) kill() {
	select {
	case <-l.done:
		return
	default:
	}
	desc := descendants(l.cmd.Process.Pid)
	_ = syscall.Kill(-l.cmd.Process.Pid, syscall.SIGKILL)
	killProcs(desc)
	<-l.done
}

// wait waits for the launch to exit, at most timeout, and reports whether
// it did.
func (l *launch) wait(timeout time.Duration) bool {
	select {
	case <-l.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// run runs name with args until it exits and returns the launch; at
// jobTimeout it kills the launch and fails the test.
func run(t *testing.T, env []string, name string, args ...string) *launch {
	t.Helper()
	l := start(t, env, name, args...)
	if !l.wait(jobTimeout) {
		l.kill()
		t.Fatalf("%s still running after %v; killed.\n%v", l.name, jobTimeout, l)
	}
	return l
}

func (l *launch) String() string {
	return fmt.Sprintf("exit code %d after %v\nstdout:\n%s\nstderr:\n%s", l.code, l.took.Round(time.Millisecond), e2e.Tail(l.stdout.String(), 4000), e2e.Tail(l.stderr.String(), 6000))
}

// syncBuffer is a bytes.Buffer safe for a writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
