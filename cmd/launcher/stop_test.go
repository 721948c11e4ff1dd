package main

// The job stops and the launcher exits whatever it is doing: dialing an
// agent that never answers, feeding stdin to a rank that never reads it,
// or writing to a stdout that was closed.

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/proc/proctest"
)

// TestSignalDuringAgentDial: a host whose agent never answers keeps the
// launcher dialing for --start-timeout; SIGINT must end the launcher then,
// not after the start timeout (here 600 s, ten times this test's deadline).
// Signals cancel dialing and preparation too, not only the running job.
func TestSignalDuringAgentDial(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "id")
	if err := os.WriteFile(key, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	kh := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(kh, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Accepts and hangs up: the agent "is not up yet", so the launcher retries.
	ln, port := listenAny(t)
	l := startLauncher(t, false, "-H", "127.0.0.2:1", "-p", port, "-i", key, "--known-hosts", kh, "--start-timeout", "600", "true")
	end := time.Now().Add(deadline)
	for ln.accepted() == 0 {
		if l.exited() || time.Now().After(end) {
			t.Fatalf("launcher never dialed the agent port")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := syscall.Kill(l.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	assertCode(t, l, 130)
}

// TestStdinNotReadDoesNotBlockStop: rank 0 never reads its stdin while the
// launcher's stdin has more to give; when rank 1 fails, the job must still
// stop and the launcher exit. The agent writes stdin off its session loop,
// so a full stdin pipe never keeps the loop from handling Stop or Signal.
func TestStdinNotReadDoesNotBlockStop(t *testing.T) {
	t.Parallel()
	trigger := filepath.Join(t.TempDir(), "fail")
	l := startLauncher(t, true, fake(t, 2, "byrank:1=failonfile:"+trigger+":7,*=sleep")...)
	ready := l.waitReady(2)
	var written atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		chunk := []byte(strings.Repeat("y", 64<<10-1) + "\n")
		for written.Load() < 64<<20 {
			n, err := l.stdin.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	t.Cleanup(func() { l.stdin.Close(); wg.Wait() })
	end := time.Now().Add(deadline)
	for written.Load() < 128<<10 { // the pipes are full: stdin is flow-controlled, one chunk in flight
		if time.Now().After(end) {
			t.Fatal("the launcher does not read its stdin")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := os.WriteFile(trigger, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	assertCode(t, l, 7)
	assertGone(t, values(ready)...)
}

// TestClosedStdoutLeavesNothing: `launcher ... | head` closes the
// launcher's stdout while ranks still print. The launcher must stop the
// job as for a signal, grandchildren included, instead of dying of SIGPIPE
// and leaving them behind (ranks would die of Pdeathsig, their
// grandchildren would not): main passes SIGPIPE to the launcher with
// SIGINT and SIGTERM. It runs the real binary to test main's wiring.
func TestClosedStdoutLeavesNothing(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "launcher")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-l", "-np", "2", "sh", "-c", "sleep 3600 & echo child $!; while :; do echo x; sleep 0.01; done")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var children []int
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		for _, p := range children {
			if !proctest.Gone(p) {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
	})
	var text strings.Builder
	sc := bufio.NewScanner(out)
	for sc.Scan() && len(children) < 2 {
		text.WriteString(sc.Text() + "\n")
		children = values(tagged(text.String(), "child"))
	}
	out.Close() // what head does after its lines
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(deadline):
		t.Fatalf("launcher still running %v after its stdout closed", deadline)
	}
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signaled() {
		t.Errorf("launcher was killed by %v when its stdout closed; stderr:\n%s", ws.Signal(), stderr.String())
	}
	if len(children) != 2 {
		t.Fatalf("grandchildren %v, want 2", children)
	}
	assertGone(t, children...)
}
