//go:build linux

// Package slurm tests the launcher inside a real Slurm allocation: the
// srun transport (one `agent --srun` per node started by one srun step)
// on a Slurm 22.05 cluster of network-namespace hosts
// (cmd/internal/slurmbed), driven as users drive it: `salloc -N3 launcher
// PROGRAM`, scancel, a killed launcher, an allocation that cannot start a
// step. It has only tests.
//
// One bed serves every test of the package (built by the first test that
// needs it, removed by TestMain): namespace prefix gws0, 198.18.196.0/24,
// nodes cn1..cn3 with 8 CPUs each as slurm.conf declares them; nothing
// else is touched. The tests of names_test.go share a second bed, whose
// node names resolve only on their own node (gwh51, 198.18.51.0/24, cn1 and
// cn2).
//
// "Nothing left" is checked through /proc: every job runs under salloc
// with a unique tag in its environment (tagEnv), which srun passes to the
// agents (--export=ALL) and the agents to every rank and every child a
// rank starts, so taggedProcs finds every process of the job, salloc and
// the launcher included, on every node. Each node's namespace must also be
// back to its slurmd alone.
package slurm

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/cmd/internal/procscan"
	"github.com/gangway-hpc/gangway/cmd/internal/slurmbed"
	"github.com/gangway-hpc/gangway/cmd/internal/slurmbed/slurmtest"
)

// jobTimeout bounds one salloc run: 2 shared cores, torch imports, MPICH.
const jobTimeout = 120 * time.Second

// tagEnv marks every process of a test's job (see the package doc).
const tagEnv = "GANGWAY_SLURM_TEST_TAG"

var shared = slurmtest.Shared{Options: slurmbed.Options{Prefix: "gws0", Subnet: 196, Nodes: 3, CPUs: 8}}

var binDir string

func TestMain(m *testing.M) {
	e2e.HelperMain() // an isolated rank
	dir, err := os.MkdirTemp("", "gangway-slurm-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	_ = os.Chmod(dir, 0o755)
	binDir = dir
	e2e.DefaultSignals()
	code := m.Run()
	if err := shared.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "slurm bed:", err)
		code = max(code, 1)
	}
	if err := localNames.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "slurm bed with local names:", err)
		code = max(code, 1)
	}
	e2e.RemoveBinaries()
	os.RemoveAll(dir)
	os.Exit(code)
}

// bed returns the shared bed once every node is idle again (a previous
// test's allocation released).
func bed(t *testing.T) *slurmbed.Bed {
	t.Helper()
	b := shared.Get(t)
	if err := b.WaitIdle(t.Context(), 60*time.Second); err != nil {
		t.Fatalf("%v%s", err, b.Logs())
	}
	return b
}

// binaries builds bin/launcher and bin/agent once per process.
func binaries(t *testing.T) (launcherBin, agentBin string) {
	t.Helper()
	return e2e.BuildBinaries(t)
}

var mpitest struct {
	once      sync.Once
	path, err string
}

// compileMPITest compiles agent/pmi/testdata/mpitest.c with Debian's
// MPICH once, or skips without it.
func compileMPITest(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("mpicc.mpich"); err != nil {
		t.Skip("mpicc.mpich not found (Debian: mpich, libmpich-dev)")
	}
	mpitest.once.Do(func() {
		out := filepath.Join(binDir, "mpitest")
		if b, err := exec.Command("mpicc.mpich", "-O2", "-Wall", "-o", out, "../../../../agent/pmi/testdata/mpitest.c").CombinedOutput(); err != nil {
			mpitest.err = fmt.Sprintf("mpicc.mpich: %v\n%s", err, b)
			return
		}
		mpitest.path = out
	})
	if mpitest.err != "" {
		t.Fatal(mpitest.err)
	}
	return mpitest.path
}

// job is one run of a command under the bed's Slurm (usually salloc
// running the launcher), tagged, in its own process group.
type job struct {
	tag            string
	cmd            *exec.Cmd
	stdout, stderr e2e.Output
	done           chan struct{}
	code           int
	took           time.Duration
}

// newTag returns a unique job tag.
func newTag(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%x", strings.ReplaceAll(t.Name(), "/", "-"), b)
}

// startJob starts argv against bed with tagEnv=tag and env added. The
// test's cleanup kills whatever of it is still running (every tagged
// process, by PID).
func startJob(t *testing.T, b *slurmbed.Bed, env []string, argv ...string) *job {
	t.Helper()
	return startJobIn(t, b, "", env, argv...)
}

// startJobIn is startJob in the working directory dir ("": the test's).
func startJobIn(t *testing.T, b *slurmbed.Bed, dir string, env []string, argv ...string) *job {
	t.Helper()
	j := &job{tag: newTag(t), done: make(chan struct{})}
	j.cmd = b.Command(t.Context(), argv[0], argv[1:]...)
	j.cmd.Dir = dir
	j.cmd.Env = append(append(j.cmd.Env, tagEnv+"="+j.tag), env...)
	j.cmd.Stdout, j.cmd.Stderr = &j.stdout, &j.stderr
	t0 := time.Now()
	if err := j.cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", argv, err)
	}
	go func() {
		err := j.cmd.Wait()
		j.took = time.Since(t0)
		j.code = j.cmd.ProcessState.ExitCode()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			j.code = -2
		}
		close(j.done)
	}()
	t.Cleanup(func() {
		select {
		case <-j.done:
		default:
			killProcs(taggedProcs(j.tag))
			_ = syscall.Kill(-j.cmd.Process.Pid, syscall.SIGKILL)
			<-j.done
		}
		if t.Failed() {
			t.Logf("job %v: %v\nslurm logs:%s", argv[:min(len(argv), 3)], j, b.Logs())
		}
	})
	return j
}

// wait waits for the job, failing the test after jobTimeout.
func (j *job) wait(t *testing.T) {
	t.Helper()
	select {
	case <-j.done:
	case <-time.After(jobTimeout):
		t.Fatalf("job still running after %v:\n%v", jobTimeout, j)
	}
}

func (j *job) String() string {
	return fmt.Sprintf("exit code %d after %v\nstdout:\n%s\nstderr:\n%s", j.code, j.took.Round(time.Millisecond), e2e.Tail(j.stdout.String(), 4000), e2e.Tail(j.stderr.String(), 6000))
}

var grantedRE = regexp.MustCompile(`salloc: Granted job allocation (\d+)`)

// jobID waits for salloc's "Granted job allocation N" and returns N.
func (j *job) jobID(t *testing.T) string {
	t.Helper()
	s, ok := j.stderr.WaitFor(jobTimeout, func(s string) bool { return grantedRE.MatchString(s) })
	if !ok {
		t.Fatalf("no allocation granted:\n%s", s)
	}
	return grantedRE.FindStringSubmatch(s)[1]
}

// sallocLauncher is `salloc SALLOC... launcher --agent-path AGENT ARGS...`.
func sallocLauncher(t *testing.T, salloc []string, args ...string) []string {
	t.Helper()
	launcherBin, agentBin := binaries(t)
	argv := append([]string{"salloc"}, salloc...)
	// -l: the tests read each line's rank from its [R] tag.
	argv = append(argv, launcherBin, "-l", "--agent-path", agentBin)
	return append(argv, args...)
}

// checkNothingLeft waits until no process carries the job's tag and every
// node's namespace holds its slurmd alone, and fails naming what is left
// (killed by PID, so later tests start clean).
func checkNothingLeft(t *testing.T, b *slurmbed.Bed, j *job) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		left := taggedProcs(j.tag)
		var extra []procInfo
		for _, n := range b.Nodes() {
			for _, p := range netnsProcs(t, n.NS) {
				if p.Pid != b.SlurmdPid(n.Name) {
					extra = append(extra, p)
				}
			}
		}
		if len(left) == 0 && len(extra) == 0 {
			return
		}
		if time.Now().After(deadline) {
			killProcs(left)
			t.Errorf("20s after the job: processes of the job still running: %v; on the nodes besides slurmd: %v", left, extra)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The /proc readers of cmd/internal/procscan, by the names these tests
// use.
type procInfo = procscan.Info

var killProcs = procscan.Kill

// taggedProcs lists the live processes whose initial environment holds
// tagEnv=tag.
func taggedProcs(tag string) []procInfo { return procscan.Tagged(tagEnv + "=" + tag) }

// netnsProcs lists the live processes in namespace ns.
func netnsProcs(t *testing.T, ns string) []procInfo {
	t.Helper()
	ps, err := procscan.InNetns(ns)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// findProc returns the live process named comm among the tagged ones.
func findProc(tag, comm string) (procInfo, bool) {
	for _, p := range taggedProcs(tag) {
		if p.Comm == comm {
			return p, true
		}
	}
	return procInfo{}, false
}
