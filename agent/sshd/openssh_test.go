package sshd_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/agenttest"
	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
)

// sshRun runs the system ssh client with args against host and returns
// its output and exit code.
func sshRun(t *testing.T, h *agenttest.Host, args []string, stdin string, env []string, command ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), agenttest.Deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ssh", append(append(args, h.Addr), command...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("ssh: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("ssh did not finish within %v", agenttest.Deadline)
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

// TestOpenSSHClient: the agent is a usable SSH server for the stock
// OpenSSH client.
func TestOpenSSHClient(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("no ssh client")
	}
	t.Parallel()
	c := agenttest.StartLocal(t, 1)
	h := c.Hosts[0]
	args := sshtest.SSHArgs(c.Keys, h.Port)
	check := func(t *testing.T, what, got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("%s: %q, want %q", what, got, want)
		}
	}

	t.Run("exit code", func(t *testing.T) {
		_, stderr, code := sshRun(t, h, args, "", nil, "exit 3")
		if code != 3 {
			t.Errorf("exit code %d, want 3; stderr %q", code, stderr)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		stdout, _, code := sshRun(t, h, args, "hello\nworld\n", nil, "cat")
		check(t, "stdout", stdout, "hello\nworld\n")
		if code != 0 {
			t.Errorf("exit code %d", code)
		}
	})
	t.Run("env", func(t *testing.T) {
		// AcceptEnv's default, as Debian's sshd_config: LANG and LC_* pass,
		// anything else sent (LD_PRELOAD above all) is dropped.
		env := []string{"LANG=C.UTF-8", "LC_TIME=bar baz", "LD_PRELOAD=/nonexistent/evil.so", "FOO=x", "NOTSENT=x"}
		stdout, _, _ := sshRun(t, h, append(args, "-o", "SendEnv=LANG LC_* LD_PRELOAD FOO"), "", env,
			`printf '%s|%s|%s|%s|%s' "$LANG" "$LC_TIME" "$LD_PRELOAD" "$FOO" "$NOTSENT"`)
		check(t, "LANG|LC_TIME|LD_PRELOAD|FOO|NOTSENT", stdout, "C.UTF-8|bar baz|||")
	})
	t.Run("stdout and stderr", func(t *testing.T) {
		stdout, stderr, code := sshRun(t, h, args, "", nil, "echo out; echo err >&2; exit 0")
		check(t, "stdout", stdout, "out\n")
		check(t, "stderr", stderr, "err\n")
		if code != 0 {
			t.Errorf("exit code %d", code)
		}
	})
	t.Run("killed by signal", func(t *testing.T) {
		// OpenSSH exits 255 when the remote command died of a signal.
		_, stderr, code := sshRun(t, h, args, "", nil, "kill -TERM $$")
		if code != 255 {
			t.Errorf("exit code %d, want 255; stderr %q", code, stderr)
		}
	})
	t.Run("shell without pty", func(t *testing.T) {
		stdout, _, code := sshRun(t, h, args, "echo from-shell\nexit 4\n", nil)
		if code != 4 || !strings.Contains(stdout, "from-shell\n") {
			t.Errorf("exit code %d, stdout %q; want 4 and from-shell", code, stdout)
		}
	})
	t.Run("pty", func(t *testing.T) {
		stdout, stderr, code := sshRun(t, h, append(args, "-tt"), "", []string{"TERM=xterm-256color"}, `tty; echo "term=$TERM"; exit 5`)
		if code != 5 || !strings.Contains(stdout, "/dev/pts/") || !strings.Contains(stdout, "term=xterm-256color\r\n") {
			t.Errorf("exit code %d, stdout %q, stderr %q; want 5, a /dev/pts tty and TERM with CRLF", code, stdout, stderr)
		}
	})
	t.Run("unknown key", func(t *testing.T) {
		other, err := sshtest.GenKeys(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := sshRun(t, h, sshtest.SSHArgs(other, h.Port), "", nil, "echo should-not-run")
		if code != 255 || stdout != "" || !strings.Contains(stderr, "Permission denied (publickey)") {
			t.Errorf("exit code %d, stdout %q, stderr %q; want 255 and Permission denied (publickey)", code, stdout, stderr)
		}
	})
}

// TestExitSignal checks what OpenSSH does not show: a command killed by a
// signal is reported as exit-signal with the signal's name.
func TestExitSignal(t *testing.T) {
	t.Parallel()
	c := agenttest.StartLocal(t, 1)
	client, err := ssh.Dial("tcp", c.Hosts[0].HostPort(), &ssh.ClientConfig{
		User:            "root",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(c.Keys.ClientSigner)},
		HostKeyCallback: ssh.FixedHostKey(c.Hosts[0].HostPub),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	s, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Run("kill -TERM $$")
	var ee *ssh.ExitError
	if !errors.As(err, &ee) || ee.Signal() != "TERM" {
		t.Fatalf("Run: %v, want exit-signal TERM", err)
	}
	t.Logf("exit-signal: %v", ee)
}
