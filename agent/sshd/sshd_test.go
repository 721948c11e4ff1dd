package sshd_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/agenttest"
	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/agent/proc/proctest"
	"github.com/gangway-hpc/gangway/agent/sshd"
)

func dialAgent(h *agenttest.Host, signer ssh.Signer) (*ssh.Client, error) {
	return ssh.Dial("tcp", h.HostPort(), &ssh.ClientConfig{
		User:            "root",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(h.HostPub),
		Timeout:         agenttest.Deadline,
	})
}

// TestAuthorizedKeyTypes: authorized_keys with RSA, ECDSA and ed25519
// keys among comments and a broken line; each key logs in, and an edit of
// the file applies at the next login.
func TestAuthorizedKeyTypes(t *testing.T) {
	t.Parallel()
	c := agenttest.StartLocal(t, 1)
	h := c.Hosts[0]
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsaS, _ := ssh.NewSignerFromKey(rk)
	ecS, _ := ssh.NewSignerFromKey(ek)
	text := "# test keys\n\n" + authLine(rsaS) + " rsa@test\nssh-ed25519 not-base64 broken\n" +
		"no-port-forwarding,no-agent-forwarding " + authLine(ecS) + " ecdsa@test\n" + authLine(c.Keys.ClientSigner) + "\n"
	if err := os.WriteFile(c.Keys.AuthorizedKeys, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]ssh.Signer{"rsa": rsaS, "ecdsa": ecS, "ed25519": c.Keys.ClientSigner} {
		cl, err := dialAgent(h, s)
		if err != nil {
			t.Errorf("%s key refused: %v", name, err)
			continue
		}
		cl.Close()
	}
	// Remove the RSA key: the next login with it is refused.
	if err := os.WriteFile(c.Keys.AuthorizedKeys, []byte(authLine(ecS)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cl, err := dialAgent(h, rsaS); err == nil {
		cl.Close()
		t.Error("RSA key still accepted after its removal from authorized_keys")
	}
}

func authLine(s ssh.Signer) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.PublicKey())))
}

// TestRestrictedKeyRefused: a key whose authorized_keys line restricts
// it (command=, from=, restrict...) must not get the full access the
// agent would give it: the agent cannot enforce those options, so it
// refuses the key.
func TestRestrictedKeyRefused(t *testing.T) {
	t.Parallel()
	c := agenttest.StartLocal(t, 1)
	for _, opt := range []string{`command="echo restricted"`, `from="10.99.99.99"`, "restrict", "no-pty"} {
		line := opt + " " + authLine(c.Keys.ClientSigner) + "\n"
		if err := os.WriteFile(c.Keys.AuthorizedKeys, []byte(line), 0o600); err != nil {
			t.Fatal(err)
		}
		cl, err := dialAgent(c.Hosts[0], c.Keys.ClientSigner)
		if err == nil {
			cl.Close()
			t.Errorf("key with %s accepted with full access", opt)
		}
	}
}

// TestStartupDeadlines: a client that connects and says nothing is
// dropped at the version timeout; one that sends its version line and
// stalls, at the login grace time.
func TestStartupDeadlines(t *testing.T) {
	t.Parallel()
	c := agenttest.StartLocal(t, 1, agenttest.WithServer(func(_ int, s *sshd.Server) {
		s.VersionTimeout, s.LoginGraceTime = 300*time.Millisecond, time.Second
	}))
	for _, tc := range []struct {
		name, send string
	}{{"silent", ""}, {"version line, then nothing", "SSH-2.0-stalling\r\n"}} {
		conn, err := net.Dial("tcp", c.Hosts[0].HostPort())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		t0 := time.Now()
		if _, err := io.WriteString(conn, tc.send); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(agenttest.Deadline))
		_, err = io.Copy(io.Discard, conn) // the banner, then EOF when the agent hangs up
		if err != nil {
			t.Fatalf("%s: agent kept the connection open: %v", tc.name, err)
		}
		t.Logf("%s: dropped after %v (version timeout 300ms, login grace 1s)", tc.name, time.Since(t0).Round(time.Millisecond))
	}
}

// TestRefusesForwarding: channel types other than session (port
// forwarding) are refused.
func TestRefusesForwarding(t *testing.T) {
	t.Parallel()
	c := agenttest.StartLocal(t, 1)
	cl, err := dialAgent(c.Hosts[0], c.Keys.ClientSigner)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_, err = cl.Dial("tcp", c.Hosts[0].HostPort())
	var oe *ssh.OpenChannelError
	if !errors.As(err, &oe) || oe.Reason != ssh.UnknownChannelType {
		t.Errorf("direct-tcpip: %v, want an unknown channel type refusal", err)
	}
	if _, err := cl.Listen("tcp", "127.0.0.1:0"); err == nil {
		t.Error("tcpip-forward accepted")
	}
}

// TestStockSessionDropped: when an ssh client's connection drops, the
// agent kills the remote command's process group, with or without a PTY.
func TestStockSessionDropped(t *testing.T) {
	t.Parallel()
	c := agenttest.StartLocal(t, 1)
	h := c.Hosts[0]
	for _, pty := range []bool{false, true} {
		t.Run("pty="+strconv.FormatBool(pty), func(t *testing.T) {
			cl, err := dialAgent(h, c.Keys.ClientSigner)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			s, err := cl.NewSession()
			if err != nil {
				t.Fatal(err)
			}
			if pty {
				if err := s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}); err != nil {
					t.Fatal(err)
				}
			}
			out, err := s.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			// The shell and a child of it in the same process group.
			if err := s.Start(`sleep 3600 & echo "pids $$ $!"; wait`); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 256)
			var got string
			for !strings.Contains(got, "\n") {
				n, err := out.Read(buf)
				if err != nil {
					t.Fatalf("read: %v (got %q)", err, got)
				}
				got += string(buf[:n])
			}
			f := strings.Fields(got)
			if len(f) < 3 || f[0] != "pids" {
				t.Fatalf("unexpected output %q", got)
			}
			shell, _ := strconv.Atoi(f[1])
			sleeper, _ := strconv.Atoi(f[2])
			t0 := time.Now()
			cl.Close() // the connection drops
			if left := proctest.WaitGone(agenttest.Deadline, shell, sleeper); len(left) > 0 {
				t.Fatalf("still running after the connection dropped: %v", left)
			}
			t.Logf("remote command and its child gone %v after the connection dropped", time.Since(t0).Round(time.Millisecond))
		})
	}
}

// TestGoClientUnknownKey: x/crypto's client offering an unknown key is
// refused.
func TestGoClientUnknownKey(t *testing.T) {
	t.Parallel()
	c := agenttest.StartLocal(t, 1)
	other, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if cl, err := dialAgent(c.Hosts[0], other.ClientSigner); err == nil {
		cl.Close()
		t.Fatal("unknown key accepted")
	} else if !strings.Contains(err.Error(), "unable to authenticate") {
		t.Errorf("error %v, want unable to authenticate", err)
	}
}
