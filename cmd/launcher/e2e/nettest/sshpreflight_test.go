//go:build linux

package nettest

import (
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
)

// TestTransportSSHPreflight: with --transport ssh the agents started for
// the job (agent --stdio) each offer a probe port of their own, and the
// preflight dials those, not sshd's port 22 (each probe of which would
// make sshd fork and re-execute itself). Two namespace hosts run only
// sshd. Healthy, a 2-host job runs. With host 0 routing to host 1
// through a gateway that does not exist, the launcher (in the root
// namespace) still reaches both sshds, and only the preflight's TCP
// connection finds the broken pair: the job fails before any rank
// starts, naming the pair and an ephemeral port, not 22.
func TestTransportSSHPreflight(t *testing.T) {
	e2e.NoTree(t, "--transport ssh")
	agentBin, launcherBin := binaries(t)
	b := newBed(t, testbed.Options{Prefix: "gwn5", Hosts: 2, Subnet: 185})
	keys, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	hosts := b.Hosts()
	var addrs []string
	for i, h := range hosts {
		if _, err := b.StartSSHD(t.Context(), i, 22, keys); err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, h.Addr)
	}
	kh, err := keys.WriteKnownHosts(addrs, 22)
	if err != nil {
		t.Fatal(err)
	}
	launch := func(t *testing.T) *launch {
		tag := newTag(t)
		return run(t, nil, launcherBin, "--transport", "ssh",
			"--ssh", "ssh -F /dev/null -o IdentitiesOnly=yes -o LogLevel=ERROR -o KexAlgorithms=curve25519-sha256",
			"-i", keys.ClientKey, "--known-hosts", kh, "--agent-path", agentBin,
			"-H", hosts[0].Addr+":1:22,"+hosts[1].Addr+":1:22", "-l", "-np", "2", "-x", tagEnv+"="+tag, "true")
	}

	t.Run("Healthy", func(t *testing.T) {
		if l := launch(t); l.code != 0 {
			t.Fatalf("launcher: %v", l)
		}
	})

	t.Run("DeadGateway", func(t *testing.T) {
		gw := strings.TrimSuffix(hosts[0].Addr, ".1") + ".200"
		route := func(op string) error {
			return exec.Command("ip", "-n", hosts[0].NS, "route", op, hosts[1].Addr+"/32", "via", gw, "dev", hosts[0].DataNIC).Run()
		}
		if err := route("add"); err != nil {
			t.Fatal(err)
		}
		defer route("del")
		l := launch(t)
		stderr := l.stderr.String()
		t.Logf("launcher with host 0 routing to host 1 through a dead gateway: exit %d\n%s", l.code, stderr)
		if l.code != 1 || !strings.Contains(stderr, "launcher: preflight:") || !strings.Contains(stderr, "nothing was started") {
			t.Fatalf("exit code %d, want 1, a preflight failure and nothing started", l.code)
		}
		var ports []string
		for line := range strings.Lines(stderr) {
			_, rest, ok := strings.Cut(line, " -> ")
			if !ok || !strings.Contains(rest, hosts[1].Addr+":") {
				continue
			}
			_, target, _ := strings.Cut(rest, "(")
			target, _, _ = strings.Cut(target, " ")
			if _, port, err := net.SplitHostPort(target); err == nil {
				ports = append(ports, port)
			}
		}
		if len(ports) == 0 {
			t.Fatalf("no probe of host 1 named in:\n%s", stderr)
		}
		for _, p := range ports {
			if p == "22" {
				t.Errorf("the preflight dialled sshd's port 22, not the agent's probe port")
			}
		}
	})
}
