package nettest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed/roottest"
)

// The fault matrix on network-namespace hosts: each case starts a real
// launcher against real agents, breaks something, and proves through /proc
// that no process of the job is left (every rank and child carries the
// job's tag in its environment) and that the launcher ends with the right
// status and words. Each runs a DGX node's shape: perHost ranks on each of
// two hosts, every rank with a child (a shell's background sleep, in the
// rank's process group). Timings are logged, never asserted.

// launcherTimeout is the agents' --launcher-timeout in these tests:
// shorter than the default, so that a silent launcher is noticed within a
// test's patience, and longer than the launcher's 5 s heartbeat.
const launcherTimeout = "12s"

// perHost is how many ranks each host of a fault bed runs: a DGX node's
// eight, one per GPU.
const perHost = 8

// faultProcs is how many processes a fault bed's job has once its ranks
// run, each a process with one child: two for each of 2×perHost ranks.
const faultProcs = 2 * 2 * perHost

// faultBed is a 2-host bed with agents that stop a silent launcher's
// ranks after launcherTimeout; hostList gives each host perHost slots.
func faultBed(t *testing.T, prefix string, subnet int) (b *testbed.Bed, hostList string, sshFlags []string) {
	t.Helper()
	roottest.RequireRoot(t)
	b = newBed(t, testbed.Options{Prefix: prefix, Hosts: 2, Subnet: subnet})
	keys, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	startAgentsWith(t, b, keys, []string{"--launcher-timeout", launcherTimeout}, 0, 1)
	var addrs []string
	for _, h := range b.Hosts() {
		addrs = append(addrs, h.Addr)
	}
	kh, err := keys.WriteKnownHosts(addrs, agentPort)
	if err != nil {
		t.Fatal(err)
	}
	slots := ":" + strconv.Itoa(perHost)
	return b, addrs[0] + slots + "," + addrs[1] + slots, []string{"-i", keys.ClientKey, "--known-hosts", kh}
}

// waitTagged waits until n processes carry tag (the ranks have started).
func waitTagged(t *testing.T, l *launch, tag string, n int) {
	t.Helper()
	deadline := time.Now().Add(jobTimeout)
	for len(taggedProcs(tag)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d processes of job %s after %v, want %d: %v", len(taggedProcs(tag)), tag, jobTimeout, n, l)
		}
		select {
		case <-l.done:
			t.Fatalf("launcher exited before the ranks started: %v", l)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestFaultLauncherStopped: a SIGSTOPped launcher sends no heartbeat; each
// agent stops the job's ranks after its --launcher-timeout and ends the
// session. Resumed, the launcher finds its agents gone: exit 255, naming
// both.
func TestFaultLauncherStopped(t *testing.T) {
	t.Parallel() // waits out agents' and the launcher's liveness bounds: with the other such test
	_, launcherBin := binaries(t)
	b, hosts, ssh := faultBed(t, "gwn6", 186)
	tag := newTag(t)
	l := start(t, nil, launcherBin, append(ssh, "-H", hosts, "-x", tagEnv+"="+tag, "sh", "-c", "sleep 600 & exec sleep 600")...)
	waitTagged(t, l, tag, faultProcs) // each rank an exec'd sleep and its child
	stopped := time.Now()
	if err := syscall.Kill(l.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitNoTagged(t, tag, jobTimeout)
	t.Logf("launcher stopped: every rank gone %v later (agents' --launcher-timeout %s)", time.Since(stopped).Round(time.Millisecond), launcherTimeout)
	if err := syscall.Kill(l.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if !l.wait(jobTimeout) {
		t.Fatalf("resumed launcher still running after %v: %v", jobTimeout, l)
	}
	if l.code != 255 {
		t.Errorf("resumed launcher: want exit 255: %v", l)
	}
	for _, h := range b.Hosts() {
		if want := "lost the agent on " + h.Addr; !strings.Contains(l.stderr.String(), want) {
			t.Errorf("resumed launcher: stderr does not say %q: %v", want, l)
		}
	}
	t.Logf("resumed launcher: exit %d; stderr:\n%s", l.code, l.stderr.String())
}

// TestFaultLinkDown: host 1's link goes down mid-job (its root-side veth:
// a pulled cable). Host 1's agent hears no heartbeat and stops its ranks;
// the launcher's keepalives find host 1 silent, the launcher stops host
// 0's ranks and exits 255 naming host 1. Once with quiet ranks, once with
// ranks that write continuously (their agent's writes to the launcher
// block on the dead link).
func TestFaultLinkDown(t *testing.T) {
	t.Parallel() // waits out agents' and the launcher's liveness bounds: with the other such test
	_, launcherBin := binaries(t)
	b, hosts, ssh := faultBed(t, "gwn7", 187)
	h1 := b.Hosts()[1].Addr
	for _, tt := range []struct {
		name, script string
		start        func(*testing.T, []string, string, ...string) *launch
	}{
		{"Quiet", "sleep 600 & exec sleep 600", start},
		// The ranks write hundreds of megabytes while the job lasts: the
		// launcher's stdout is /dev/null, not the test's memory.
		{"Writing", "sleep 600 & while :; do echo \"rank $RANK line of forty bytes or so\"; done", startDiscarding},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := b.SetLinkUp(1); err != nil {
				t.Fatal(err)
			}
			tag := newTag(t)
			l := tt.start(t, nil, launcherBin, append(ssh, "-H", hosts, "--kill-grace", "1s", "-x", tagEnv+"="+tag, "sh", "-c", tt.script)...)
			waitTagged(t, l, tag, faultProcs) // each rank and its child
			down := time.Now()
			if err := b.SetLinkDown(1); err != nil {
				t.Fatal(err)
			}
			if !l.wait(jobTimeout) {
				t.Fatalf("launcher still running %v after host 1's link went down: %v", jobTimeout, l)
			}
			t.Logf("link down: launcher exited %v later; stderr:\n%s", (l.took - down.Sub(l.start)).Round(time.Millisecond), l.stderr.String())
			waitNoTagged(t, tag, jobTimeout)
			t.Logf("link down: every rank gone %v after the link went down", time.Since(down).Round(time.Millisecond))
			if want := "lost the agent on " + h1 + ": no answer to SSH keepalives"; l.code != 255 || !strings.Contains(l.stderr.String(), want) {
				t.Errorf("want exit 255 and %q: %v", want, l)
			}
		})
	}
	if err := b.SetLinkUp(1); err != nil {
		t.Error(err)
	}
}

// TestFaultIgnoresTERM: a rank fails while the others ignore SIGTERM: the
// launcher stops them, SIGKILL follows --kill-grace, nothing is left and
// the failing rank's code is the launcher's. Then the launcher gets
// SIGHUP (its terminal went away) mid-job: it stops every rank and exits
// 129.
func TestFaultIgnoresTERM(t *testing.T) {
	_, launcherBin := binaries(t)
	b, hosts, ssh := faultBed(t, "gwn8", 188)
	tag := newTag(t)
	// Every rank ignores SIGTERM and starts a child; rank 3 fails once
	// the test has seen them all ($0 appears).
	fail := filepath.Join(t.TempDir(), "fail")
	script := `trap '' TERM; sleep 600 & if [ "$RANK" = 3 ]; then while [ ! -e "$0" ]; do sleep 0.1; done; echo "rank 3 fails" >&2; exit 7; fi; while :; do sleep 1; done`
	l := start(t, nil, launcherBin, append(ssh, "-H", hosts, "--kill-grace", "1s", "-x", tagEnv+"="+tag, "sh", "-c", script, fail)...)
	waitTagged(t, l, tag, faultProcs) // each rank a shell and its sleep 600
	failed := time.Now()
	if err := os.WriteFile(fail, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !l.wait(jobTimeout) {
		t.Fatalf("launcher still running %v after rank 3 failed: %v", jobTimeout, l)
	}
	if want := "job failed: rank 3 on " + b.Hosts()[0].Addr; l.code != 7 || !strings.Contains(l.stderr.String(), want) {
		t.Errorf("want exit 7 and %q: %v", want, l)
	}
	waitNoTagged(t, tag, 10*time.Second)
	t.Logf("rank 3 failed, the others ignoring SIGTERM: launcher exited %d %v later, every rank and child gone %v later (--kill-grace 1s)",
		l.code, (l.took - failed.Sub(l.start)).Round(time.Millisecond), time.Since(failed).Round(time.Millisecond))

	t.Run("SIGHUP", func(t *testing.T) {
		tag := newTag(t)
		l := start(t, nil, launcherBin, append(ssh, "-H", hosts, "--kill-grace", "1s", "-x", tagEnv+"="+tag, "sh", "-c", "trap '' TERM; sleep 600 & exec sleep 600")...)
		waitTagged(t, l, tag, faultProcs)
		hup := time.Now()
		if err := syscall.Kill(l.cmd.Process.Pid, syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if !l.wait(jobTimeout) {
			t.Fatalf("launcher still running after SIGHUP: %v", l)
		}
		if l.code != 128+int(syscall.SIGHUP) || !strings.Contains(l.stderr.String(), "stopping every rank") {
			t.Errorf("want exit %d after stopping every rank: %v", 128+int(syscall.SIGHUP), l)
		}
		waitNoTagged(t, tag, 10*time.Second)
		t.Logf("launcher SIGHUP, ranks ignoring SIGTERM: launcher exited %d %v later, every rank and child gone %v later (--kill-grace 1s)",
			l.code, (l.took - hup.Sub(l.start)).Round(time.Millisecond), time.Since(hup).Round(time.Millisecond))
	})
}
