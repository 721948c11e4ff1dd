package testbed_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
)

const sshClient = "/usr/bin/ssh"

func needSSH(t *testing.T) {
	t.Helper()
	for _, p := range []string{testbed.SSHDPath, sshClient} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("OpenSSH not installed: %v", err)
		}
	}
}

// sshRun runs the system ssh client from the root namespace.
func sshRun(t *testing.T, args []string, addr, command string) (stdout string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(t.Context(), sshClient, append(args, "root@"+addr, command)...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("ssh %s %q: %v", addr, command, err)
	}
	if code := cmd.ProcessState.ExitCode(); code == 255 {
		t.Fatalf("ssh %s %q: connection failed: %s", addr, command, errb.String())
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

// envNames returns the sorted variable names of `env` output.
func envNames(out string) []string {
	var names []string
	for l := range strings.Lines(out) {
		if n, _, ok := strings.Cut(l, "="); ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

func TestSSHD(t *testing.T) {
	t.Parallel()
	needSSH(t)
	b := newBed(t, testbed.Options{Prefix: "gwt3", Hosts: 2, Subnet: 203})
	keys, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const port = 2203
	h := b.Hosts()
	if _, err := b.StartSSHD(t.Context(), 0, port, keys); err != nil {
		t.Fatal(err)
	}
	// Host 1 keeps .bashrc: the control for the clean-shell check.
	if _, err := b.StartSSHDWithBashrc(t.Context(), 1, port, keys); err != nil {
		t.Fatal(err)
	}
	args := sshtest.SSHArgs(keys, port)

	out, code := sshRun(t, args, h[0].Addr, "echo hello; exit 3")
	if out != "hello\n" || code != 3 {
		t.Errorf("ssh 'echo hello; exit 3' = %q, exit %d; want \"hello\\n\", exit 3", out, code)
	}

	// The host key is the one in Keys: strict checking against KnownHosts.
	kh, err := keys.WriteKnownHosts([]string{h[0].Addr}, port)
	if err != nil {
		t.Fatal(err)
	}
	strict := slices.Clone(args)
	for i, a := range strict {
		switch a {
		case "StrictHostKeyChecking=no":
			strict[i] = "StrictHostKeyChecking=yes"
		case "UserKnownHostsFile=/dev/null":
			strict[i] = "UserKnownHostsFile=" + kh
		}
	}
	if out, code := sshRun(t, strict, h[0].Addr, "echo ok"); out != "ok\n" || code != 0 {
		t.Errorf("ssh with known_hosts = %q, exit %d", out, code)
	}

	// Which variables does this machine's ~/.bashrc export? Debian's bash
	// reads ~/.bashrc for `bash -c` when SSH_CLIENT is set.
	home, _ := os.UserHomeDir()
	bashEnv := func(extra ...string) []string {
		cmd := exec.Command("env", append([]string{"-i", "HOME=" + home, "PATH=/usr/bin:/bin"}, extra...)...)
		cmd.Stdin = nil
		o, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v", cmd.Args, err)
		}
		return envNames(string(o))
	}
	base := bashEnv("bash", "--norc", "--noprofile", "-c", "env")
	withRC := bashEnv("SSH_CLIENT=1.2.3.4 1 2", "bash", "-c", "env")
	var fromRC []string
	for _, n := range withRC {
		if !slices.Contains(base, n) && n != "SSH_CLIENT" {
			fromRC = append(fromRC, n)
		}
	}
	clean, _ := sshRun(t, args, h[0].Addr, "env")
	dirty, _ := sshRun(t, args, h[1].Addr, "env")
	cleanNames, dirtyNames := envNames(clean), envNames(dirty)
	if len(fromRC) == 0 {
		t.Logf("~/.bashrc exports nothing here; the clean-shell check is vacuous on this machine")
	} else {
		t.Logf("~/.bashrc exports %v", fromRC)
	}
	for _, n := range fromRC {
		if slices.Contains(cleanNames, n) {
			t.Errorf("ssh session on host 0 has %s, exported by ~/.bashrc", n)
		}
		if !slices.Contains(dirtyNames, n) {
			t.Errorf("control: ssh session on host 1 (with .bashrc) lacks %s, exported by ~/.bashrc", n)
		}
	}
	if out, _ := sshRun(t, args, h[0].Addr, `echo "$SHLVL $HOME"`); out != "1 "+home+"\n" {
		t.Errorf("session SHLVL and HOME = %q, want \"1 %s\"", out, home)
	}
	// The bind mount stays inside sshd's mount namespace.
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err != nil || strings.Contains(string(mi), ".bashrc") {
		t.Errorf("a .bashrc mount leaked into the test's mount namespace (%v)", err)
	}

	for i, label := range []string{"empty .bashrc", "with ~/.bashrc"} {
		var times []time.Duration
		for range 5 {
			start := time.Now()
			sshRun(t, args, h[i].Addr, "true")
			times = append(times, time.Since(start))
		}
		slices.Sort(times)
		t.Logf("ssh host true, %s: median %v of %v", label, times[2].Round(time.Millisecond), times)
	}
}
