package nettest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gangway/agent/testbed"
	"gangway/agent/testbed/roottest"
)

// Open MPI's own mpirun (Debian's openmpi-bin 4.1), run in the root
// namespace, starts its orted daemons through our agents on port 22122
// as if they were sshd (PROTOCOLS.md section 3); the orteds then run the
// ranks and carry their output back to mpirun.

// rshWrapper writes the plm_rsh_agent script: the system ssh with the
// test's key and no host key checking, passing through what mpirun (or a
// tree-spawning orted, which runs it inside a namespace host: the file
// system is shared) gives it. Named "ssh" so that mpirun adds -x as it
// does for real ssh. Each call appends "<netns of the caller> <args>" to
// log, so tests can see who launched which daemon.
func rshWrapper(t *testing.T, keys testbed.Keys) (wrapper, log string) {
	t.Helper()
	dir := t.TempDir()
	_ = os.Chmod(dir, 0o755)
	wrapper, log = filepath.Join(dir, "ssh"), filepath.Join(dir, "rsh.log")
	// testbed.SSHArgs without -p: mpirun supplies it (plm_rsh_args).
	var opts []string
	args := testbed.SSHArgs(keys, agentPort)
	for i := 0; i < len(args); i++ {
		if args[i] == "-p" {
			i++
			continue
		}
		opts = append(opts, args[i])
	}
	script := fmt.Sprintf("#!/bin/sh\necho \"ns=$(ip netns identify $$) $*\" >> %s\nexec /usr/bin/ssh %s \"$@\"\n", log, strings.Join(opts, " "))
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper, log
}

// rshCall is one logged call of the wrapper.
type rshCall struct {
	NS     string // the caller's namespace; "" for the root namespace
	Target string // the host it logged in to
}

// rshCalls reads the wrapper's log; targets are recognised among addrs.
func rshCalls(t *testing.T, log string, addrs []string) []rshCall {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatalf("wrapper log: %v", err)
	}
	var calls []rshCall
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		c := rshCall{NS: strings.TrimPrefix(f[0], "ns=")}
		for _, w := range f[1:] {
			if slices.Contains(addrs, w) {
				c.Target = w
				break
			}
		}
		calls = append(calls, c)
	}
	return calls
}

// checkOMPILines checks that every rank printed its one line.
func checkOMPILines(t *testing.T, out string, size int) {
	t.Helper()
	seen := map[int]int{}
	for line := range strings.Lines(out) {
		var r, n, s int
		if _, err := fmt.Sscanf(line, "ompi rank %d size %d sum %d", &r, &n, &s); err != nil {
			continue
		}
		seen[r]++
		if n != size || s != size*(size-1)/2 {
			t.Errorf("rank %d printed %q, want size %d sum %d", r, strings.TrimSpace(line), size, size*(size-1)/2)
		}
	}
	for r := range size {
		if seen[r] != 1 {
			t.Errorf("rank %d printed its line %d times, want once", r, seen[r])
		}
	}
	if len(seen) != size {
		t.Errorf("ranks %v printed, want 0..%d", seen, size-1)
	}
}

func TestOpenMPIMpirun(t *testing.T) {
	roottest.RequireRoot(t)
	mpirun, err := exec.LookPath("mpirun.openmpi")
	if err != nil {
		t.Skip("mpirun.openmpi not found (install Debian's openmpi-bin)")
	}
	bin := compileMPI(t, &ompiHello, "mpicc.openmpi", "testdata/ompi_hello.c", "ompi_hello")
	const subnet = 181
	b := newBed(t, testbed.Options{Prefix: "gwn1", Hosts: 3, Subnet: subnet})
	keys, err := testbed.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	hosts := b.Hosts()
	agents := startAgents(t, b, keys, 0, 1, 2)
	var addrs []string
	for _, h := range hosts {
		addrs = append(addrs, h.Addr)
	}
	cidr := fmt.Sprintf("198.18.%d.0/24", subnet)

	mpirunJob := func(t *testing.T, nhosts, perHost int, extra ...string) []rshCall {
		t.Helper()
		wrapper, log := rshWrapper(t, keys)
		tag := newTag(t)
		var hl []string
		for _, a := range addrs[:nhosts] {
			hl = append(hl, a+":"+strconv.Itoa(perHost))
		}
		np := nhosts * perHost
		args := []string{"--allow-run-as-root",
			"--mca", "plm_rsh_agent", wrapper, "--mca", "plm_rsh_args", "-p " + strconv.Itoa(agentPort),
			"--mca", "oob_tcp_if_include", cidr, "--mca", "btl_tcp_if_include", cidr,
			"--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
			"-x", tagEnv, "-H", strings.Join(hl, ","), "-np", strconv.Itoa(np)}
		args = append(append(args, extra...), bin)
		l := run(t, []string{tagEnv + "=" + tag}, mpirun, args...)
		if l.code != 0 {
			t.Fatalf("mpirun: %v", l)
		}
		t.Logf("mpirun output:\n%s", l.stdout.String())
		checkOMPILines(t, l.stdout.String(), np)
		left := waitNoTagged(t, tag, 10*time.Second)
		var clean time.Duration
		for i, h := range hosts {
			clean = max(clean, waitNetnsOnly(t, h.NS, 10*time.Second, agents[i].Pid))
		}
		calls := rshCalls(t, log, addrs)
		t.Logf("%d ranks on %d hosts: mpirun ran %v; no rank left (checked in %v); every namespace back to its agent alone after %v; daemon launches (caller ns -> target): %v",
			np, nhosts, l.took.Round(time.Millisecond), left.Round(time.Millisecond), clean.Round(time.Millisecond), calls)
		return calls
	}

	t.Run("TwoHosts", func(t *testing.T) {
		calls := mpirunJob(t, 2, 2)
		if len(calls) != 2 {
			t.Errorf("%d daemon launches, want 2: %v", len(calls), calls)
		}
	})

	// routed_radix 1 makes a chain: mpirun starts host 0's orted, which
	// starts host 1's through the agent, which starts host 2's.
	t.Run("TreeSpawn", func(t *testing.T) {
		calls := mpirunJob(t, 3, 2, "--mca", "routed_radix", "1")
		want := []rshCall{{"", addrs[0]}, {hosts[0].NS, addrs[1]}, {hosts[1].NS, addrs[2]}}
		for _, w := range want {
			if !slices.Contains(calls, w) {
				t.Errorf("no daemon launch %+v; launches: %+v", w, calls)
			}
		}
		if len(calls) != len(want) {
			t.Errorf("%d daemon launches, want %d: %+v", len(calls), len(want), calls)
		}
	})
}
