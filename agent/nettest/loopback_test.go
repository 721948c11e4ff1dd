package nettest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"gangway/agent"
	"gangway/agent/testbed"
	"gangway/launcher"
)

// loopAgents are agent.Servers running in this process, each on its own
// loopback address 127.0.180.<i+1> (the whole 127/8 is local on Linux)
// and an ephemeral port, with ranks started as this process's children.
type loopAgents struct {
	Hosts      []string // "127.0.180.1:SLOTS:PORT", for -H
	Keys       testbed.Keys
	KnownHosts string // known_hosts trusting every agent's [addr]:port
}

// startLoopAgents starts n in-process agents named h0..h(n-1), each
// offering slots slots. They stop, and every session and rank with them,
// when the test ends.
func startLoopAgents(t *testing.T, n, slots int) *loopAgents {
	t.Helper()
	keys, err := testbed.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	la := &loopAgents{Keys: keys}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// Registered first, so it runs last: after the launcher's cleanup.
	t.Cleanup(func() { cancel(); wg.Wait() })
	var kh strings.Builder
	for i := range n {
		addr := fmt.Sprintf("127.0.180.%d", i+1)
		l, err := net.Listen("tcp", addr+":0")
		if err != nil {
			t.Fatalf("listen on %s: %v", addr, err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named("h" + strconv.Itoa(i))
		srv := &agent.Server{
			Agent:          &agent.Agent{Name: "h" + strconv.Itoa(i), Version: "nettest", Log: log.Named("agent")},
			Log:            log.Named("sshd"),
			HostKey:        keys.HostSigner,
			AuthorizedKeys: keys.AuthorizedKeys,
		}
		wg.Go(func() {
			if err := srv.Serve(ctx, l); err != nil {
				t.Errorf("agent h%d: %v", i, err)
			}
		})
		la.Hosts = append(la.Hosts, fmt.Sprintf("%s:%d:%d", addr, slots, port))
		kh.WriteString(keys.KnownHosts([]string{addr}, port))
	}
	la.KnownHosts = keys.Dir + "/known_hosts"
	if err := os.WriteFile(la.KnownHosts, []byte(kh.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return la
}

// inProcLaunch is one launcher.Main run in this process.
type inProcLaunch struct {
	code           int
	stdout, stderr bytes.Buffer
	took           time.Duration
}

func (l *inProcLaunch) String() string {
	return fmt.Sprintf("exit code %d after %v\nstdout:\n%s\nstderr:\n%s", l.code, l.took.Round(time.Millisecond), tail(l.stdout.String(), 4000), tail(l.stderr.String(), 6000))
}

// launchInProc runs launcher.Main against la's agents with args (the
// connection options are added in front) and returns when it does. At
// jobTimeout its context is cancelled, which stops the job.
func launchInProc(t *testing.T, la *loopAgents, args ...string) *inProcLaunch {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), jobTimeout)
	defer cancel()
	cwd, _ := os.Getwd()
	l := &inProcLaunch{}
	d := launcher.Deps{
		Log:    zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named("launcher"),
		Stdout: &l.stdout, Stderr: &l.stderr,
		Version: "nettest", Cwd: cwd,
	}
	full := append([]string{"-i", la.Keys.ClientKey, "--known-hosts", la.KnownHosts, "-H", strings.Join(la.Hosts, ",")}, args...)
	t0 := time.Now()
	l.code = launcher.Main(ctx, full, d, nil)
	l.took = time.Since(t0)
	if ctx.Err() != nil && t.Context().Err() == nil {
		t.Fatalf("launcher still running after %v; cancelled.\n%v", jobTimeout, l)
	}
	return l
}
