package nettest

import (
	"slices"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/cmd/internal/procscan"
)

// The /proc readers of cmd/internal/procscan, by the names these tests
// use.
type procInfo = procscan.Info

var (
	readProc    = procscan.Read
	descendants = procscan.Descendants
	killProcs   = procscan.Kill
	alive       = procscan.Alive
)

// taggedProcs lists the live processes whose initial environment holds
// tagEnv=tag.
func taggedProcs(tag string) []procInfo { return procscan.Tagged(tagEnv + "=" + tag) }

// waitNoTagged waits until no live process carries tag, and fails naming
// the leftovers (after SIGKILLing them by PID) if some are still there
// after timeout. It returns how long it waited.
func waitNoTagged(t *testing.T, tag string, timeout time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	for {
		left := taggedProcs(tag)
		if len(left) == 0 {
			return time.Since(t0)
		}
		if time.Since(t0) > timeout {
			killProcs(left)
			t.Errorf("processes of job %s still running %v after the job ended: %v", tag, timeout, left)
			return time.Since(t0)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// netnsProcs lists the live processes in namespace ns.
func netnsProcs(t *testing.T, ns string) []procInfo {
	t.Helper()
	ps, err := procscan.InNetns(ns)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// waitNetnsOnly waits until the live processes in ns are exactly keep
// (the host's agent or sshd), and fails naming the others after timeout.
// Survivors are left to Bed.Close, which kills them by PID.
func waitNetnsOnly(t *testing.T, ns string, timeout time.Duration, keep ...int) time.Duration {
	t.Helper()
	t0 := time.Now()
	for {
		var extra []procInfo
		for _, p := range netnsProcs(t, ns) {
			if !slices.Contains(keep, p.Pid) {
				extra = append(extra, p)
			}
		}
		if len(extra) == 0 {
			return time.Since(t0)
		}
		if time.Since(t0) > timeout {
			t.Errorf("namespace %s: processes besides %v still running %v after the job ended: %v", ns, keep, timeout, extra)
			return time.Since(t0)
		}
		time.Sleep(25 * time.Millisecond)
	}
}
