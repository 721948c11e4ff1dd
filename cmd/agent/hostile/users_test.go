package hostile_test

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/agenttest"
	"github.com/gangway-hpc/gangway/agent/sshd"
	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

// clientAs logs in to the cluster's agent as user with signer.
func clientAs(c *e2e.Cluster, user string, signer ssh.Signer) (*ssh.Client, error) {
	h := c.Hosts[0]
	return ssh.Dial("tcp", h.HostPort(), &ssh.ClientConfig{
		User:            user,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(h.HostPub),
		Timeout:         e2e.Deadline,
	})
}

// refusal is the agent's reason when err is its refusal of a channel for
// lack of resources, else "".
func refusal(err error) string {
	var oe *ssh.OpenChannelError
	if errors.As(err, &oe) && oe.Reason == ssh.ResourceShortage {
		return oe.Message
	}
	return ""
}

// supervisors counts the agent's children that are job supervisors,
// and adds up their proportional set sizes (PSS: shared pages split
// between the processes that share them) in KiB.
func supervisors(agentPid int) (n, pssKiB int) {
	es, _ := os.ReadDir("/proc")
	for _, e := range es {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == fmt.Sprint(agentPid) {
			if cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline"); strings.HasPrefix(string(cmd), "gangway-supervisor\x00") {
				n++
				if pid, err := strconv.Atoi(e.Name()); err == nil {
					if m, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid)); err == nil {
						for line := range strings.Lines(string(m)) {
							if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss:" {
								k, _ := strconv.Atoi(f[1])
								pssKiB += k
							}
						}
					}
				}
			}
		}
	}
	return n, pssKiB
}

// TestUserFlood: on a root agent serving two ordinary users, with its
// default per-user limits and 1024 file descriptors, one user floods it
// with launcher jobs (each with a sleeping rank and its supervisor),
// launcher sessions that never send a job, stock sessions and
// connections, each until the agent refuses one naming its limit; the
// real launcher, as that user, is refused naming the connection limit.
// Meanwhile the other user's 8-rank job through the real launcher runs
// to completion and exits 0. The agent's RSS and descriptors at the
// height of the flood are logged.
func TestUserFlood(t *testing.T) {
	agenttest.RequireRoot(t)
	t.Parallel()
	launcherBin, _ := e2e.BuildBinaries(t)
	c := agentProc(t, e2e.Wrapped("prlimit", "--nofile=1024:1024"))
	p, h := c.Procs[0], c.Hosts[0]
	flooder, victim := agenttest.NewUser(t, ""), agenttest.NewUser(t, "")
	fk, vk := flooder.NewKeys(t), victim.NewKeys(t)
	fd0 := openFDs(p.Pid())
	rss0, _ := memKiB(t, p.Pid())

	var conns []*ssh.Client
	dial := func() (*ssh.Client, error) {
		cl, err := clientAs(c, flooder.Name, fk.ClientSigner)
		if err != nil {
			return nil, err
		}
		conns = append(conns, cl)
		return cl, nil
	}
	defer func() {
		for _, cl := range conns {
			cl.Close()
		}
	}()
	// launcherSession opens the gangway subsystem on a new connection
	// and says Hello, as a launcher does.
	launcherSession := func(job string) *wire.Conn {
		t.Helper()
		cl, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		ch, reqs, err := cl.OpenChannel("session", nil)
		if err != nil {
			t.Fatalf("launcher session %s: %v", job, err)
		}
		go ssh.DiscardRequests(reqs)
		if ok, err := ch.SendRequest("subsystem", true, ssh.Marshal(struct{ Name string }{wire.Subsystem})); !ok || err != nil {
			t.Fatalf("subsystem: %v %v", ok, err)
		}
		return hello(t, ch, job)
	}

	// Jobs, each with a rank that sleeps, until one is refused. The first
	// two flood their PMI servers first: one puts more than a job may
	// keep (40,000 keys of 900 bytes against --pmi-max-bytes' 32 MiB) and
	// reads its answers, the other asks 300,000 lookup_names and reads
	// none (it is dropped and stopped after --pmi-write-timeout).
	jobs, jobRefusal := 0, ""
	sleep := []string{"/bin/sh", "-c", "exec sleep 600"}
	const kvs = "kvs_flood"
	pmiFlood := []string{
		`awk -v k=` + kvs + ` 'BEGIN { v = sprintf("%900s", ""); gsub(/ /, "x", v); print "cmd=init pmi_version=1 pmi_subversion=1";
			for (i = 0; i < 40000; i++) print "cmd=put kvsname=" k " key=k" i " value=" v }' >&"$PMI_FD" &
		 echo "refused $(head -n 40001 <&"$PMI_FD" | grep -c "rc=-1")"; exec sleep 600`,
		`awk 'BEGIN { print "cmd=init pmi_version=1 pmi_subversion=1"; for (i = 0; i < 300000; i++) print "cmd=lookup_name service=s" i }' >&"$PMI_FD"
		 exec sleep 600`,
	}
	var putFlood *wire.Conn
	for i := range sshd.DefaultMaxUserJobs + 1 {
		wc := launcherSession(fmt.Sprintf("flood%d", i))
		if i == 0 {
			putFlood = wc
		}
		job := wire.StartJob{JobID: fmt.Sprintf("flood%d", i), StdinRank: -1, KillGrace: time.Second,
			Ranks: []wire.RankSpec{{Rank: 0, Argv: sleep, Env: []string{"PATH=/usr/bin:/bin"}}}}
		if i < len(pmiFlood) {
			job.PMI = &wire.PMIJob{KVSName: kvs, Size: 2, Mapping: "(vector,(0,2,1))"}
			job.Ranks[0].Argv = []string{"/bin/bash", "-c", pmiFlood[i]}
		}
		if err := wc.Send(wire.KindStart, job); err != nil {
			t.Fatal(err)
		}
		var r wire.Ready
		expect(t, wc, wire.KindReady, &r)
		if r.Err != "" {
			jobRefusal = r.Err
			break
		}
		if err := wc.Send(wire.KindGo, nil); err != nil {
			t.Fatal(err)
		}
		expect(t, wc, wire.KindStarted, nil)
		jobs++
	}
	if jobs != sshd.DefaultMaxUserJobs || !strings.Contains(jobRefusal, "--max-user-jobs") {
		t.Fatalf("%d jobs started, then %q; want %d and a refusal naming --max-user-jobs", jobs, jobRefusal, sshd.DefaultMaxUserJobs)
	}
	// The put flood's rank says how many puts were refused: the job's
	// keys stopped at the bound.
	refusedPuts := -1
	for refusedPuts < 0 {
		m, err := putFlood.Recv()
		if err != nil {
			t.Fatalf("the put flood's session: %v", err)
		}
		if _, _, data, err := m.Output(); err == nil && strings.HasPrefix(string(data), "refused ") {
			refusedPuts, _ = strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(string(data), "refused ")))
		}
	}
	if refusedPuts < 1000 {
		t.Errorf("%d of 40,000 puts of 900 bytes refused, want those past --pmi-max-bytes", refusedPuts)
	}
	// Launcher sessions that never send a job: 10 on each of 3
	// connections, as many as a connection takes.
	idle := 0
	for range 3 {
		cl, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		for range sshd.DefaultMaxSessions {
			ch, reqs, err := cl.OpenChannel("session", nil)
			if err != nil {
				t.Fatalf("idle launcher session %d: %v", idle+1, err)
			}
			go ssh.DiscardRequests(reqs)
			if ok, err := ch.SendRequest("subsystem", true, ssh.Marshal(struct{ Name string }{wire.Subsystem})); !ok || err != nil {
				t.Fatalf("subsystem: %v %v", ok, err)
			}
			hello(t, ch, "idle")
			idle++
		}
	}
	// Connections, each with a stock session, until one is refused: its
	// first channel is.
	sessions := jobs + 1 + idle
	var stock []*ssh.Client
	connRefusal := ""
	for connRefusal == "" && len(conns) <= sshd.DefaultMaxUserConnections {
		cl, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.NewSession(); err != nil {
			if connRefusal = refusal(err); connRefusal == "" {
				t.Fatalf("connection %d: %v", len(conns), err)
			}
			conns = conns[:len(conns)-1]
			cl.Close()
			break
		}
		stock = append(stock, cl)
		sessions++
	}
	if len(conns) != sshd.DefaultMaxUserConnections || !strings.Contains(connRefusal, "--max-user-connections") {
		t.Fatalf("%d connections, then %q; want %d and a refusal naming --max-user-connections", len(conns), connRefusal, sshd.DefaultMaxUserConnections)
	}
	// More stock sessions on those connections until one is refused.
	sessionRefusal := ""
	for _, cl := range stock {
		for sessionRefusal == "" {
			_, err := cl.NewSession()
			if err != nil {
				sessionRefusal = refusal(err)
				if strings.Contains(sessionRefusal, "--max-sessions") {
					sessionRefusal = "" // this connection is full: the next one
					break
				}
				if sessionRefusal == "" {
					t.Fatalf("session %d: %v", sessions+1, err)
				}
				break
			}
			sessions++
		}
	}
	if sessions != sshd.DefaultMaxUserSessions || !strings.Contains(sessionRefusal, "--max-user-sessions") {
		t.Fatalf("%d sessions, then %q; want %d and a refusal naming --max-user-sessions", sessions, sessionRefusal, sshd.DefaultMaxUserSessions)
	}
	fdFlood := openFDs(p.Pid())
	rssFlood, _ := memKiB(t, p.Pid())
	if rssFlood > 256<<10 {
		t.Errorf("the agent's RSS at the flood's height is %d KiB", rssFlood)
	}
	sups, supPSS := supervisors(p.Pid())

	// The flooder's own launcher is told which limit it hit (within 10 s:
	// its login to the agent busy with the flood must get that far).
	l := e2e.StartProc(t, nil, launcherBin, "-i", fk.ClientKey, "--known-hosts", c.KnownHosts, "--start-timeout", "10",
		"-np", "1", "-H", fmt.Sprintf("%s@%s:1:%d", flooder.Name, h.Addr, h.Port), "/bin/true")
	if code := l.Wait(t); code != 1 || !strings.Contains(l.Stderr.String(), "--max-user-connections") {
		t.Errorf("the flooder's launcher: exit %d, want 1 naming --max-user-connections:\n%s", code, l.Stderr)
	}
	// The other user's job runs to completion.
	v := e2e.StartProc(t, nil, launcherBin, "-i", vk.ClientKey, "--known-hosts", c.KnownHosts,
		"-np", "8", "-H", fmt.Sprintf("%s@%s:8:%d", victim.Name, h.Addr, h.Port), "/bin/sh", "-c", "echo rank-$RANK-of-$WORLD_SIZE")
	code := v.Wait(t)
	if code != 0 || strings.Count(v.Stdout.String(), "-of-8") != 8 {
		t.Fatalf("the other user's job: exit %d\nstdout:\n%s\nstderr:\n%s", code, v.Stdout, v.Stderr)
	}
	alive(t, p)
	// The flood ends: every job of the flooder stops, supervisors too.
	for _, cl := range conns {
		cl.Close()
	}
	deadline := time.Now().Add(e2e.Deadline)
	for n, _ := supervisors(p.Pid()); n > 0; n, _ = supervisors(p.Pid()) {
		if time.Now().After(deadline) {
			t.Fatalf("%d supervisors left %v after the flooder's connections closed", n, e2e.Deadline)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := strings.Count(p.Stderr.String(), "refused over a per-user limit"); n == 0 || n > 3*20 {
		t.Errorf("%d log lines for refusals over a per-user limit, want some, rate-limited", n)
	}
	t.Logf("flooder %s: %d jobs (%d supervisors, PSS %d KiB together; one put 40,000 PMI keys of 900 bytes, %d refused; one asked 300,000 lookup_names unread), %d launcher sessions without a job, %d sessions, %d connections; refusals:\n  %s\n  %s\n  %s",
		flooder.Name, jobs, sups, supPSS, refusedPuts, idle, sessions, len(conns), jobRefusal, sessionRefusal, connRefusal)
	t.Logf("the agent: %d descriptors and RSS %d KiB before, %d descriptors (of 1024) and RSS %d KiB at the flood's height; the other user's 8-rank job took %v and exited 0",
		fd0, rss0, fdFlood, rssFlood, v.Ended.Sub(v.Started).Round(time.Millisecond))
}
