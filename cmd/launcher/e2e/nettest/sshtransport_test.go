package nettest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed/roottest"
)

// TestTransportSSH: `launcher --transport ssh` reaches a namespace host
// that runs only a stock OpenSSH sshd (port 22) and starts `agent --stdio`
// there through the system ssh; 2 ranks print their environment. After the
// launcher exits, the namespace holds sshd alone: no agent --stdio, no
// rank, no sshd session process.
func TestTransportSSH(t *testing.T) {
	e2e.NoTree(t, "--transport ssh")
	roottest.RequireRoot(t)
	agentBin, launcherBin := binaries(t)
	b := newBed(t, testbed.Options{Prefix: "gwn3", Hosts: 1, Subnet: 183})
	keys, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := b.Hosts()[0]
	sshd, err := b.StartSSHD(t.Context(), 0, 22, keys)
	if err != nil {
		t.Fatal(err)
	}
	kh, err := keys.WriteKnownHosts([]string{h.Addr}, 22)
	if err != nil {
		t.Fatal(err)
	}
	launch := func(t *testing.T, tag string, args ...string) *launch {
		return start(t, nil, launcherBin, append([]string{"--transport", "ssh",
			"--ssh", "ssh -F /dev/null -o IdentitiesOnly=yes -o LogLevel=ERROR -o KexAlgorithms=curve25519-sha256",
			"-i", keys.ClientKey, "--known-hosts", kh, "--agent-path", agentBin,
			"-H", h.Addr + ":2:22", "-l", "-np", "2", "-x", tagEnv + "=" + tag}, args...)...)
	}

	t.Run("Env", func(t *testing.T) {
		tag := newTag(t)
		l := launch(t, tag, "env")
		if !l.wait(jobTimeout) {
			l.kill()
			t.Fatalf("launcher still running after %v: %v", jobTimeout, l)
		}
		if l.code != 0 {
			t.Fatalf("launcher: %v", l)
		}
		lines := e2e.RankLines(l.stdout.String())
		for r := range 2 {
			env := lines[r]
			want := []string{
				"RANK=" + strconv.Itoa(r), "WORLD_SIZE=2", "LOCAL_RANK=" + strconv.Itoa(r), "LOCAL_WORLD_SIZE=2",
				"PMI_RANK=" + strconv.Itoa(r), "PMI_SIZE=2", "GANGWAY_HOST=" + h.Addr,
				"MASTER_ADDR=" + h.Addr, tagEnv + "=" + tag,
			}
			for _, w := range want {
				if !slices.Contains(env, w) {
					t.Errorf("rank %d's environment lacks %s", r, w)
				}
			}
			// sshd ran agent --stdio: the ranks inherit its session's variables.
			if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "SSH_CONNECTION=") }) {
				t.Errorf("rank %d's environment has no SSH_CONNECTION: not started through sshd?", r)
			}
			t.Logf("rank %d: %d variables, among them %v", r, len(env), filterEnv(env, "RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "GANGWAY_HOST=", "MASTER_ADDR=", "MASTER_PORT=", "PMI_FD=", "SSH_CONNECTION="))
		}
		if len(lines) != 2 {
			t.Errorf("output from ranks %v, want 0 and 1", slices.Sorted(func(yield func(int) bool) {
				for r := range lines {
					if !yield(r) {
						return
					}
				}
			}))
		}
		left := waitNoTagged(t, tag, 10*time.Second)
		clean := waitNetnsOnly(t, h.NS, 10*time.Second, sshd.Pid)
		t.Logf("2 ranks through sshd + agent --stdio: launcher ran %v; no rank left (checked in %v); namespace back to sshd alone after %v",
			l.took.Round(time.Millisecond), left.Round(time.Millisecond), clean.Round(time.Millisecond))
	})

	// --ssh is split with shell quoting: a known_hosts path with a space,
	// given only inside a quoted ssh option, reaches ssh as one word with
	// its double quotes (which ssh needs: it splits UserKnownHostsFile on
	// spaces itself); split on spaces, ssh in BatchMode would refuse the
	// host key.
	t.Run("QuotedSSHOption", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "known hosts")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(kh)
		if err != nil {
			t.Fatal(err)
		}
		spaced := filepath.Join(dir, "known hosts")
		if err := os.WriteFile(spaced, b, 0o600); err != nil {
			t.Fatal(err)
		}
		tag := newTag(t)
		l := run(t, nil, launcherBin, "--transport", "ssh",
			"--ssh", `ssh -F /dev/null -o IdentitiesOnly=yes -o "LogLevel=ERROR" -o 'UserKnownHostsFile="`+spaced+`"' -o StrictHostKeyChecking=yes`,
			"-i", keys.ClientKey, "--agent-path", agentBin, "-H", h.Addr+":2:22", "-l", "-np", "2", "-x", tagEnv+"="+tag, "true")
		if l.code != 0 {
			t.Fatalf("launcher: %v", l)
		}
	})

	// A missing --agent-path binary fails at once with its own message,
	// not after --start-timeout (whose message would name it).
	t.Run("AgentPathMissing", func(t *testing.T) {
		l := run(t, nil, launcherBin, "--transport", "ssh",
			"--ssh", "ssh -F /dev/null -o IdentitiesOnly=yes -o LogLevel=ERROR",
			"-i", keys.ClientKey, "--known-hosts", kh, "--agent-path", "/gw/no/such/agent",
			"--start-timeout", "60s", "-H", h.Addr+":2:22", "-np", "2", "true")
		stderr := l.stderr.String()
		t.Logf("failed after %v:\n%s", l.took.Round(time.Millisecond), stderr)
		if l.code != 1 || !strings.Contains(stderr, "no agent binary at --agent-path /gw/no/such/agent on the host") {
			t.Errorf("exit code %d, want 1 and the missing agent named: %v", l.code, l)
		}
		if strings.Contains(stderr, "--start-timeout") {
			t.Errorf("waited for --start-timeout on a missing agent binary")
		}
	})

	// The launcher killed with SIGKILL mid-job: its ssh client sees EOF on
	// stdin and passes it on, agent --stdio ends its session and stops its
	// ranks, and sshd's session processes go.
	t.Run("LauncherKilled", func(t *testing.T) {
		tag := newTag(t)
		l := launch(t, tag, "sleep", "60")
		for len(taggedProcs(tag)) < 2 {
			if l.wait(50*time.Millisecond) || time.Since(l.start) > jobTimeout {
				l.kill()
				t.Fatalf("2 ranks did not start: %v", l)
			}
		}
		desc := descendants(l.cmd.Process.Pid) // the ssh client
		t.Cleanup(func() { killProcs(desc) })
		if err := l.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		ranks := waitNoTagged(t, tag, 10*time.Second)
		clean := waitNetnsOnly(t, h.NS, 10*time.Second, sshd.Pid)
		for time.Since(killed) < 10*time.Second && slices.ContainsFunc(desc, alive) {
			time.Sleep(25 * time.Millisecond)
		}
		for _, p := range desc {
			if alive(p) {
				t.Errorf("%v (the launcher's child) still running 10s after the launcher was killed", p)
			}
		}
		t.Logf("launcher killed: ranks gone after %v, namespace back to sshd alone after %v, launcher's children %v gone after %v",
			ranks.Round(time.Millisecond), clean.Round(time.Millisecond), desc, time.Since(killed).Round(time.Millisecond))
	})
}

// filterEnv keeps the variables with one of the given prefixes.
func filterEnv(env []string, prefixes ...string) []string {
	var out []string
	for _, kv := range env {
		if slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(kv, p) }) {
			out = append(out, kv)
		}
	}
	return out
}

// stockSSHHosts builds a bed of hosts that run only a stock OpenSSH sshd
// on port 22, whose sessions' shell reads rc as the user's ~/.bashrc
// (an empty one for ""), and returns their addresses, the keys and a
// known_hosts file for them.
func stockSSHHosts(t *testing.T, o testbed.Options, rc string) (addrs []string, keys sshtest.Keys, knownHosts string) {
	t.Helper()
	b := newBed(t, o)
	keys, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range b.Hosts() {
		if _, err := b.StartSSHDShellRC(t.Context(), i, 22, keys, rc); err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, h.Addr)
	}
	if knownHosts, err = keys.WriteKnownHosts(addrs, 22); err != nil {
		t.Fatal(err)
	}
	return addrs, keys, knownHosts
}

// noisyBashrc is a ~/.bashrc as HPC users have them: a greeting and an
// environment module's banner on stdout before the interactive-shell
// check, which bash (started by sshd for the command) still runs.
const noisyBashrc = `echo "Welcome to $(hostname), $USER"
module() { echo "module: $*"; }
module load cuda/12.2 nccl/2.21
# Source global definitions
[ -f /etc/bashrc ] && . /etc/bashrc
[ -z "$PS1" ] && return
alias ll='ls -l'
`

// TestTransportSSHNoisyShell: `launcher --transport ssh` to two hosts
// whose users' ~/.bashrc prints a greeting and module banners on stdout
// before agent --stdio starts: the launcher skips what the shell printed,
// says so once, and the job of eight ranks on each host runs.
func TestTransportSSHNoisyShell(t *testing.T) {
	e2e.NoTree(t, "--transport ssh")
	roottest.RequireRoot(t)
	agentBin, launcherBin := binaries(t)
	addrs, keys, kh := stockSSHHosts(t, testbed.Options{Prefix: "gwn2", Hosts: 2, Subnet: 182}, noisyBashrc)
	tag := newTag(t)
	l := run(t, nil, launcherBin, "--transport", "ssh",
		"--ssh", "ssh -F /dev/null -o IdentitiesOnly=yes -o LogLevel=ERROR -o KexAlgorithms=curve25519-sha256",
		"-i", keys.ClientKey, "--known-hosts", kh, "--agent-path", agentBin,
		"-H", addrs[0]+":8:22,"+addrs[1]+":8:22", "-l", "-np", "16", "-x", tagEnv+"="+tag, "sh", "-c", `echo "rank $RANK of $WORLD_SIZE"`)
	t.Logf("launcher: %v", l)
	if l.code != 0 {
		t.Fatalf("exit code %d, want 0", l.code)
	}
	lines := e2e.RankLines(l.stdout.String())
	for r := range 16 {
		if want := fmt.Sprintf("rank %d of 16", r); !slices.Contains(lines[r], want) {
			t.Errorf("rank %d printed %q, want %q", r, lines[r], want)
		}
	}
	if stderr := l.stderr.String(); !strings.Contains(stderr, "the remote shell printed on stdout before the agent started") || !strings.Contains(stderr, "Welcome to") {
		t.Errorf("the launcher does not say what the remote shell printed:\n%s", stderr)
	}
	waitNoTagged(t, tag, 10*time.Second)

	// Behind the same noise, a missing agent binary is still named at
	// once, from what the shell said on stderr.
	l = run(t, nil, launcherBin, "--transport", "ssh",
		"--ssh", "ssh -F /dev/null -o IdentitiesOnly=yes -o LogLevel=ERROR -o KexAlgorithms=curve25519-sha256",
		"-i", keys.ClientKey, "--known-hosts", kh, "--agent-path", "/gw/no/such/agent", "--start-timeout", "60s",
		"-H", addrs[0]+":8:22,"+addrs[1]+":8:22", "-np", "16", "true")
	if stderr := l.stderr.String(); l.code != 1 || !strings.Contains(stderr, "no agent binary at --agent-path /gw/no/such/agent on the host") {
		t.Errorf("missing agent behind a noisy shell: %v", l)
	}
}

// TestTransportSSHUserConfig: `launcher --transport ssh -F CONFIG` with
// an ssh configuration as users write it for interactive logins: a pty
// asked for (RequestTTY force, whose echo sent the launcher's own Hello
// back to it), a RemoteCommand that puts every login into tmux (which
// ssh refuses beside a command line: the launch retried it until
// --start-timeout), X11 forwarded, escapes on. The job of eight ranks on
// each of two hosts runs as through a plain configuration.
func TestTransportSSHUserConfig(t *testing.T) {
	e2e.NoTree(t, "--transport ssh")
	roottest.RequireRoot(t)
	agentBin, launcherBin := binaries(t)
	addrs, keys, kh := stockSSHHosts(t, testbed.Options{Prefix: "gwu0", Hosts: 2, Subnet: 179}, "")
	config := filepath.Join(t.TempDir(), "config")
	text := fmt.Sprintf(`# a laptop's ~/.ssh/config, for interactive work on the nodes
Host *
    RequestTTY force
    RemoteCommand tmux new -A -s main
    ForwardX11 yes
    EscapeChar ~
    ServerAliveInterval 60
    IdentitiesOnly yes
    IdentityFile %s
    UserKnownHostsFile %s
    LogLevel ERROR
    KexAlgorithms curve25519-sha256
`, keys.ClientKey, kh)
	if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	tag := newTag(t)
	l := run(t, nil, launcherBin, "--transport", "ssh", "-F", config, "--agent-path", agentBin, "--start-timeout", "60s",
		"-H", addrs[0]+":8:22,"+addrs[1]+":8:22", "-l", "-np", "16", "-x", tagEnv+"="+tag, "sh", "-c", `echo "rank $RANK of $WORLD_SIZE"`)
	if l.code != 0 {
		t.Fatalf("launcher: %v", l)
	}
	lines := e2e.RankLines(l.stdout.String())
	for r := range 16 {
		if want := fmt.Sprintf("rank %d of 16", r); !slices.Contains(lines[r], want) {
			t.Errorf("rank %d printed %q, want %q", r, lines[r], want)
		}
	}
	waitNoTagged(t, tag, 10*time.Second)
}
