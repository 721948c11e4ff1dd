//go:build linux

package slurm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/cmd/internal/slurmbed"
)

// sleeper is a rank that says "ready PID" and sleeps; rank $FAIL (if
// set) exits 7 once every rank is up instead.
const sleeper = `echo "ready $$"; if [ "$RANK" = "${FAIL-}" ]; then sleep 1; exit 7; fi; exec sleep 300`

// waitReady waits until n ranks printed "ready PID".
func waitReady(t *testing.T, j *job, n int) {
	t.Helper()
	if s, ok := j.stdout.WaitFor(jobTimeout, e2e.HasReady(n)); !ok {
		t.Fatalf("%d ranks not ready: %v\nstdout so far:\n%s", n, j, s)
	}
}

// TestSallocFailingRank: 3 nodes x 8 ranks; rank 20 (on cn3) exits 7
// while the others sleep: the launcher stops the whole gang on every node
// and exits 7 naming the rank and counting the 23 it stopped; nothing is
// left on any node.
func TestSallocFailingRank(t *testing.T) {
	b := bed(t)
	j := startJob(t, b, nil, sallocLauncher(t, []string{"-N3", "--ntasks-per-node=8"}, "--kill-grace", "2s", "-x", "FAIL=20", "sh", "-c", sleeper)...)
	j.wait(t)
	if j.code != 7 {
		t.Fatalf("exit code %d, want rank 20's 7: %v", j.code, j)
	}
	for _, want := range []string{"rank 20 on cn3", "launcher: 23 other ranks were stopped", "launcher: exit code 7"} {
		if !strings.Contains(j.stderr.String(), want) {
			t.Errorf("launcher's report lacks %q:\n%s", want, j.stderr.String())
		}
	}
	checkNothingLeft(t, b, j)
}

// TestScancel: scancel of the job while its ranks run: Slurm signals
// every process of the step, the ranks die of SIGTERM, the launcher
// reports that (exit 143) and that Slurm ended the job (asked of
// slurmctld: slurmstepd's "CANCELLED" line comes from one node only, and
// only while its part of the step still runs), does not restart the gang
// although --max-restarts allows it (the allocation is gone), and
// nothing is left on any node.
func TestScancel(t *testing.T) {
	j := slurmEnds(t, func(b *slurmbed.Bed, id string) {
		if out, err := b.Command(t.Context(), "scancel", id).CombinedOutput(); err != nil {
			t.Fatalf("scancel %s: %v: %s", id, err, out)
		}
	}, `cancelled job %s \(scancel`)
	if j.code != 128+int(syscall.SIGTERM) || !strings.Contains(j.stderr.String(), "SIGTERM") {
		t.Errorf("exit code %d, want 143 and SIGTERM said (ranks killed by SIGTERM): %v", j.code, j)
	}
	t.Logf("scancel: %v", j)
}

// slurmEnds runs a job of 3 nodes x 8 sleeping ranks under salloc with
// --max-restarts 2, has end end it from outside Slurm's way once every
// rank runs (id: the job's), and holds what every job Slurm ends must
// show: the launcher fails and says, asked of slurmctld, what said
// (a pattern given the job's id; or that Slurm is still ending the job,
// COMPLETING, when the launcher has waited its bound), does not restart
// (the allocation is gone), started each rank once, and leaves nothing.
func slurmEnds(t *testing.T, end func(b *slurmbed.Bed, id string), said string) *job {
	t.Helper()
	b := bed(t)
	j := startJob(t, b, nil, sallocLauncher(t, []string{"-N3", "--ntasks-per-node=8"}, "--kill-grace", "2s", "--max-restarts", "2", "sh", "-c", sleeper)...)
	id := j.jobID(t)
	waitReady(t, j, 24)
	end(b, id)
	j.wait(t)
	stderr := j.stderr.String()
	if j.code == 0 {
		t.Fatalf("exit code 0 for a job Slurm ended: %v", j)
	}
	ended := regexp.MustCompile(`(?m)^launcher: Slurm (` + fmt.Sprintf(said, id) + `|is ending job ` + id + ` \(JobState=COMPLETING)`)
	if !ended.MatchString(stderr) {
		t.Errorf("launcher's report does not say how Slurm ended job %s (%s):\n%s", id, ended, stderr)
	}
	if strings.Contains(stderr, "restarting") {
		t.Errorf("the launcher restarted the gang in an allocation Slurm ended:\n%s", stderr)
	}
	if n := strings.Count(j.stdout.String(), "ready "); n != 24 {
		t.Errorf("%d ranks started, want the 24 of the one attempt", n)
	}
	checkNothingLeft(t, b, j)
	return j
}

// TestNodeFail: an administrator (or slurmctld, for a node that stopped
// answering) sets one node of a running 3x8 job DOWN: Slurm ends the job
// with JobState=NODE_FAIL and kills its steps on every node. The launcher
// says so, asked of slurmctld, and does not restart the gang although
// --max-restarts allows it (the allocation is gone); nothing is left on
// any node (slurmEnds).
func TestNodeFail(t *testing.T) {
	j := slurmEnds(t, func(b *slurmbed.Bed, _ string) {
		t.Cleanup(func() {
			// The bed's nodes must be back for the next test (WaitIdle);
			// slurmctld may have returned cn2 to service already when
			// its slurmd registered again (ReturnToService=2).
			ctx := context.Background()
			if out, _ := b.Command(ctx, "scontrol", "show", "node", "-o", "cn2").Output(); !strings.Contains(string(out), "State=DOWN") {
				return
			}
			if out, err := b.Command(ctx, "scontrol", "update", "nodename=cn2", "state=resume").CombinedOutput(); err != nil {
				t.Errorf("scontrol update nodename=cn2 state=resume: %v: %s", err, out)
			}
		})
		if out, err := b.Command(t.Context(), "scontrol", "update", "nodename=cn2", "state=down", "reason=gangway-test").CombinedOutput(); err != nil {
			t.Fatalf("scontrol update nodename=cn2 state=down: %v: %s", err, out)
		}
	}, `ended job %s: one of its nodes failed \(JobState=NODE_FAIL`)
	t.Logf("node failure: %v", j)
}

// TestPreempted: a job of the bed's partition, 3 nodes x 8, preempted by
// a job of a partition of higher PriorityTier on the same nodes (the
// bed's PreemptMode is CANCEL, as on clusters with a preemptible
// partition): Slurm cancels the job and kills its step everywhere. The
// launcher says Slurm preempted the job, asked of slurmctld, does not
// restart although --max-restarts allows it (the allocation is gone),
// started each rank once, and leaves nothing (slurmEnds).
func TestPreempted(t *testing.T) {
	j := slurmEnds(t, func(b *slurmbed.Bed, _ string) {
		out, err := b.Command(t.Context(), "sbatch", "--parsable", "-p", "urgent", "-N3", "-o", "/dev/null", "--wrap", "sleep 1").CombinedOutput()
		if err != nil {
			t.Fatalf("sbatch -p urgent: %v: %s", err, out)
		}
		urgent := strings.TrimSpace(string(out))
		t.Cleanup(func() { _ = b.Command(context.Background(), "scancel", urgent).Run() })
	}, `preempted job %s: a job of a higher priority`)
	t.Logf("preempted: %v", j)
}

// TestSallocHang: a hang in a real MPICH job of 3 nodes x 8 ranks under
// salloc, rank 2 asleep and the others in the first collective: with
// --hang-timeout the agents srun started collect every rank's stacks
// (the ranks stopped for the dump) inside the step; the launcher names
// rank 2 alone, exits 124, and nothing is left on any node.
func TestSallocHang(t *testing.T) {
	if _, err := exec.LookPath("gdb"); err != nil {
		t.Skip("gdb not installed (Debian: gdb)")
	}
	b := bed(t)
	bin := compileMPITest(t)
	j := startJob(t, b, nil, sallocLauncher(t, []string{"-N3", "--ntasks-per-node=8"}, "--hang-timeout", "10s", "--output-filename", t.TempDir(),
		"-x", "UCX_TLS=tcp,self,sm", "-x", "UCX_WARN_UNUSED_ENV_VARS=n", bin, "hang")...)
	j.wait(t)
	stderr := j.stderr.String()
	if j.code != 124 {
		t.Fatalf("exit code %d, want 124 after a hang: %v", j.code, j)
	}
	if odd := e2e.LineWith(stderr, "launcher: odd one out: "); !strings.HasPrefix(odd, "launcher: odd one out: rank 2 on cn1: ") || !strings.Contains(odd, "(in __sleep") {
		t.Errorf("the report does not name rank 2 on cn1 in its sleep:\n%s", stderr)
	}
	if n := strings.Count(stderr, "odd one out: "); n != 1 {
		t.Errorf("%d odd ones out, want rank 2 alone:\n%s", n, stderr)
	}
	if l := e2e.LineWith(stderr, "no stacks from"); l != "" {
		t.Errorf("%s", l)
	}
	checkNothingLeft(t, b, j)
}

// TestSbatchScancel: the launcher in a batch script (sbatch, the way
// most jobs run), eight ranks on each of two nodes; scancel while they
// run. Slurm signals every process of the job, the batch script's and
// the launcher's among them, and once the script's shell has died it
// kills what is left of the batch step, the launcher too, at a moment of
// its choosing: so the launcher's report, and whether it got as far as
// asking slurmctld (TestScancel's line, under salloc), cannot be
// required here. What must hold: no rank started twice (no restart under
// --max-restarts 1 got as far as a rank), the job failed, and nothing is
// left on any node.
func TestSbatchScancel(t *testing.T) {
	b := bed(t)
	launcherBin, agentBin := binaries(t)
	out := filepath.Join(t.TempDir(), "slurm.out")
	script := fmt.Sprintf("%s -l --agent-path %s --kill-grace 2s --max-restarts 1 sh -c '%s'", launcherBin, agentBin, sleeper)
	j := startJob(t, b, nil, "sbatch", "--wait", "--parsable", "-N2", "--ntasks-per-node=8", "-o", out, "--wrap", script)
	idOut, ok := j.stdout.WaitFor(jobTimeout, func(s string) bool { return strings.HasSuffix(s, "\n") })
	id := strings.TrimSpace(idOut)
	if !ok || id == "" {
		t.Fatalf("sbatch gave no job id: %v", j)
	}
	deadline := time.Now().Add(jobTimeout)
	for {
		data, _ := os.ReadFile(out)
		if e2e.HasReady(16)(string(data)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("16 ranks not ready in %v; job output:\n%s", jobTimeout, data)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if o, err := b.Command(t.Context(), "scancel", id).CombinedOutput(); err != nil {
		t.Fatalf("scancel %s: %v: %s", id, err, o)
	}
	j.wait(t)
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	report := string(data)
	if j.code == 0 {
		t.Errorf("sbatch --wait exit 0 for a cancelled job:\n%s", e2e.Tail(report, 4000))
	}
	if n := strings.Count(report, "] ready "); n != 16 {
		t.Errorf("%d ranks started, want the 16 of the one attempt:\n%s", n, e2e.Tail(report, 4000))
	}
	checkNothingLeft(t, b, j)
	t.Logf("the job's output after scancel:\n%s", e2e.Tail(report, 1500))
}

// TestLauncherUnderSrun: `srun launcher ...` in an allocation of two
// nodes of two tasks each, the habit srun-launched programs teach, would
// run four launchers of the whole job; each task refuses at once (exit
// 2, naming its task and the fix) and no agent step starts. The fix it
// names, one launcher under srun --ntasks=1, runs the whole job.
func TestLauncherUnderSrun(t *testing.T) {
	b := bed(t)
	launcherBin, agentBin := binaries(t)
	j := startJob(t, b, nil, "salloc", "-N2", "--ntasks-per-node=2", "srun", launcherBin, "--agent-path", agentBin, "sh", "-c", sleeper)
	j.wait(t)
	stderr := j.stderr.String()
	if j.code == 0 || strings.Count(stderr, "of 4 of srun step") != 4 || !strings.Contains(stderr, "run the launcher once") {
		t.Errorf("want each of the 4 tasks to refuse: %v", j)
	}
	if strings.Contains(j.stdout.String(), "ready") {
		t.Errorf("ranks ran: %v", j)
	}
	checkNothingLeft(t, b, j)

	// The fix it names works: under srun --ntasks=1 (whose step's
	// SLURM_TASKS_PER_NODE is its own "1") the one launcher runs the
	// job's sixteen ranks, eight on each node.
	one := startJob(t, b, nil, "salloc", "-N2", "--ntasks-per-node=8", "srun", "--ntasks=1", launcherBin, "-l", "--agent-path", agentBin, "sh", "-c", `echo "on $(hostname)"`)
	one.wait(t)
	if out := one.stdout.String(); one.code != 0 || strings.Count(out, "] on cn1\n") != 8 || strings.Count(out, "] on cn2\n") != 8 {
		t.Errorf("under srun --ntasks=1, want eight ranks on each node: %v", one)
	}
	checkNothingLeft(t, b, one)
}

// TestLauncherKilled: the launcher dies by SIGKILL mid-job. srun, which
// got the parent-death signal, cancels the step, and the agents lose
// their launcher: every agent and rank on every node is gone.
func TestLauncherKilled(t *testing.T) {
	b := bed(t)
	// salloc exits 0 when its command dies of a signal: a shell between
	// them reports how the launcher ended.
	report := []string{"-N3", "--ntasks-per-node=8", "sh", "-c", `"$@"; echo "launcher exit status $?" >&2`, "sh"}
	j := startJob(t, b, nil, sallocLauncher(t, report, "sh", "-c", sleeper)...)
	waitReady(t, j, 24)
	l, ok := findProc(j.tag, "launcher")
	if !ok {
		t.Fatalf("no launcher process among the job's: %v", taggedProcs(j.tag))
	}
	if _, ok := findProc(j.tag, "srun"); !ok {
		t.Fatalf("no srun process among the job's: %v", taggedProcs(j.tag))
	}
	if err := syscall.Kill(l.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	j.wait(t)
	if !strings.Contains(j.stderr.String(), "launcher exit status 137") {
		t.Errorf("want the launcher killed by SIGKILL (status 137): %v", j)
	}
	checkNothingLeft(t, b, j)
	t.Logf("launcher SIGKILLed: %v", j)
}

// TestAllocationBusy: an allocation whose nodes cannot run the agents'
// step yet gives a clear message and exit 1 within --start-timeout, never
// a hang, and leaves nothing.
func TestAllocationBusy(t *testing.T) {
	b := bed(t)
	nodes := "cn[1-3]"
	hosts := "cn1,cn2,cn3"

	// Pending: another job holds every node, so this job has not started;
	// srun refuses a step in it at once, and the launcher quotes srun.
	t.Run("Pending", func(t *testing.T) {
		holder := allocate(t, b, "--exclusive")
		pending := submit(t, b)
		j := startJob(t, b, []string{"SLURM_JOB_ID=" + pending}, launcherOnly(t, "--transport", "slurm", "-H", hosts, "--start-timeout", "60", "true")...)
		j.wait(t)
		if j.code != 1 {
			t.Fatalf("exit code %d, want 1: %v", j.code, j)
		}
		if s := j.stderr.String(); !strings.Contains(s, "srun ended") || !strings.Contains(s, "Job is pending execution") || strings.Contains(s, "start-timeout") {
			t.Errorf("want srun's refusal quoted at once, not the start timeout:\n%s", s)
		}
		cancel(t, b, pending, holder)
		checkNothingLeft(t, b, j)
	})

	// Suspended: srun waits, silently, for a step it cannot create; the
	// launcher gives up at --start-timeout naming the job, and ends srun.
	t.Run("Suspended", func(t *testing.T) {
		id := allocate(t, b)
		if out, err := b.Command(t.Context(), "scontrol", "suspend", id).CombinedOutput(); err != nil {
			t.Fatalf("scontrol suspend %s: %v: %s", id, err, out)
		}
		env := []string{"SLURM_JOB_ID=" + id, "SLURM_JOB_NODELIST=" + nodes, "SLURM_TASKS_PER_NODE=1(x3)"}
		j := startJob(t, b, env, launcherOnly(t, "--start-timeout", "3", "true")...)
		j.wait(t)
		if j.code != 1 {
			t.Fatalf("exit code %d, want 1: %v", j.code, j)
		}
		want := "hosts not reachable within --start-timeout 3s: host cn1: the srun step that starts the agents has not started (srun is still waiting: is job " + id + " suspended, or its nodes busy?"
		if !strings.Contains(j.stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, j.stderr.String())
		}
		cancel(t, b, id)
		checkNothingLeft(t, b, j)
	})
}

// launcherOnly is the launcher's command line without salloc.
func launcherOnly(t *testing.T, args ...string) []string {
	t.Helper()
	launcherBin, agentBin := binaries(t)
	return append([]string{launcherBin, "--agent-path", agentBin}, args...)
}

// allocate makes a 3-node allocation without a shell (salloc --no-shell)
// and returns its job id; the test's cleanup cancels it.
func allocate(t *testing.T, b *slurmbed.Bed, opts ...string) string {
	t.Helper()
	out, err := b.Command(t.Context(), "salloc", append([]string{"-N3", "--no-shell", "--immediate=30"}, opts...)...).CombinedOutput()
	m := grantedRE.FindStringSubmatch(string(out))
	if err != nil || m == nil {
		t.Fatalf("salloc --no-shell: %v: %s", err, out)
	}
	t.Cleanup(func() { cancel(t, b, m[1]) })
	return m[1]
}

// submit queues a 3-node job that cannot start while allocate's holds the
// nodes, and returns its id.
func submit(t *testing.T, b *slurmbed.Bed) string {
	t.Helper()
	out, err := b.Command(t.Context(), "sbatch", "--parsable", "-N3", "-o", "/dev/null", "--wrap", "sleep 300").Output()
	id := strings.TrimSpace(string(out))
	if err != nil || id == "" {
		t.Fatalf("sbatch: %v: %s", err, out)
	}
	t.Cleanup(func() { cancel(t, b, id) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, _ := b.Command(t.Context(), "squeue", "-h", "-j", id, "-o", "%T").Output()
		if strings.TrimSpace(string(st)) == "PENDING" {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s is %q, not pending", id, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cancel cancels jobs (resuming a suspended one first) and waits until
// every node is idle again. It works in cleanups too (its own context).
func cancel(t *testing.T, b *slurmbed.Bed, ids ...string) {
	t.Helper()
	ctx, stop := context.WithTimeout(context.Background(), 90*time.Second)
	defer stop()
	for _, id := range ids {
		_ = b.Command(ctx, "scontrol", "resume", id).Run()
		_ = b.Command(ctx, "scancel", id).Run()
	}
	if err := b.WaitIdle(ctx, 60*time.Second); err != nil {
		t.Errorf("after scancel %v: %v", ids, err)
	}
}

// TestInterrupted: Ctrl-C at a terminal, a SIGINT to the launcher's whole
// process group, which holds srun too: srun only reports (its first
// SIGINT), the launcher stops the ranks and exits 130, and nothing is
// left.
func TestInterrupted(t *testing.T) {
	b := bed(t)
	j := startJob(t, b, nil, sallocLauncher(t, []string{"-N3", "--ntasks-per-node=8"}, "--kill-grace", "2s", "sh", "-c", sleeper)...)
	waitReady(t, j, 24)
	l, ok := findProc(j.tag, "launcher")
	if !ok {
		t.Fatalf("no launcher process among the job's: %v", taggedProcs(j.tag))
	}
	s, ok := findProc(j.tag, "srun")
	if !ok {
		t.Fatalf("no srun process among the job's: %v", taggedProcs(j.tag))
	}
	lpg, spg := pgid(l.Pid), pgid(s.Pid)
	if lpg <= 0 || lpg != spg {
		t.Fatalf("launcher pid %d in process group %d, srun pid %d in %d: want srun in the launcher's group", l.Pid, lpg, s.Pid, spg)
	}
	if err := syscall.Kill(-lpg, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	j.wait(t)
	// salloc reports 0 for a command killed by a signal, and it may be
	// in the group too: the launcher's own last words tell its status.
	for _, want := range []string{"launcher: got SIGINT, stopping every rank", "launcher: exit code 130"} {
		if !strings.Contains(j.stderr.String(), want) {
			t.Errorf("stderr lacks %q: %v", want, j)
		}
	}
	checkNothingLeft(t, b, j)
}

// TestAgentMissing: a wrong --agent-path fails at once with srun's words,
// exit 1.
func TestAgentMissing(t *testing.T) {
	b := bed(t)
	launcherBin, _ := binaries(t)
	j := startJob(t, b, nil, "salloc", "-N3", launcherBin, "--agent-path", "/nonexistent/agent", "true")
	j.wait(t)
	if j.code != 1 {
		t.Fatalf("exit code %d, want 1: %v", j.code, j)
	}
	for _, want := range []string{"srun ended", "/nonexistent/agent"} {
		if !strings.Contains(j.stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, j.stderr.String())
		}
	}
	checkNothingLeft(t, b, j)
}

// pgid is pid's process group, or -1.
func pgid(pid int) int {
	g, err := syscall.Getpgid(pid)
	if err != nil {
		return -1
	}
	return g
}
