package sshd_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/agenttest"
	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/agent/sshd"
)

// newCA makes a CA key pair with ssh-keygen and returns its private key
// file (the public key is FILE.pub).
func newCA(t *testing.T, name string) string {
	t.Helper()
	ca := filepath.Join(t.TempDir(), name)
	agenttest.SSHKeygen(t, "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", ca)
	return ca
}

// userCert makes a fresh key pair and signs it as a user certificate
// with ssh-keygen -s ca -I keyID and the given options (-n, -V, -O...);
// it returns the private key file (the certificate is FILE-cert.pub).
func userCert(t *testing.T, ca, keyID string, opts ...string) string {
	t.Helper()
	id := filepath.Join(t.TempDir(), "id_ed25519")
	agenttest.SSHKeygen(t, "-q", "-t", "ed25519", "-N", "", "-f", id)
	agenttest.SSHKeygen(t, append(append([]string{"-q", "-s", ca, "-I", keyID}, opts...), id+".pub")...)
	return id
}

// certArgs are ssh options logging in as name with the key id and its
// certificate.
func certArgs(id string, port int, name string) []string {
	return append(sshtest.SSHArgs(sshtest.Keys{ClientKey: id}, port), "-o", "CertificateFile="+id+"-cert.pub", "-l", name)
}

// certSigner loads id and its certificate for x/crypto's client.
func certSigner(t *testing.T, id string) ssh.Signer {
	t.Helper()
	b, err := os.ReadFile(id)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.ParsePrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := os.ReadFile(id + "-cert.pub")
	if err != nil {
		t.Fatal(err)
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(cb)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := ssh.NewCertSigner(pub.(*ssh.Certificate), s)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestUserCertificates: user certificates signed by a CA of
// --trusted-user-ca-keys log in as their principals, within their
// validity and source-address; force-command runs instead of the
// client's command and shuts the gangway subsystem; no-pty refuses a
// pty; unknown critical options, missing principals and other CAs are
// refused.
func TestUserCertificates(t *testing.T) {
	agenttest.RequireRoot(t)
	t.Parallel()
	ca, other := newCA(t, "user-ca"), newCA(t, "other-ca")
	u := agenttest.NewUser(t, "")
	obs, logs := observed()
	c := agenttest.StartLocal(t, 1, withServer(obs, func(s *sshd.Server) { s.TrustedUserCAKeys = ca + ".pub" }))
	h := c.Hosts[0]

	run := func(t *testing.T, args []string, command string) (string, string, int) {
		t.Helper()
		return sshRun(t, h, args, "", nil, command)
	}
	t.Run("principal root", func(t *testing.T) {
		id := userCert(t, ca, "alice@laptop", "-n", "root", "-V", "-5m:+1h")
		stdout, stderr, code := run(t, certArgs(id, h.Port, "root"), "id -u")
		if code != 0 || stdout != "0\n" {
			t.Fatalf("exit %d, %q %q", code, stdout, stderr)
		}
		caPub, _, _, _, _ := ssh.ParseAuthorizedKey(must(os.ReadFile(ca + ".pub")))
		if !hasEntry(logs, "login", map[string]string{"method": "certificate", "key_id": "alice@laptop", "ca_fingerprint": ssh.FingerprintSHA256(caPub)}) {
			t.Errorf("no login line with the certificate's key ID and CA: %v", logs.FilterMessage("login").All())
		}
	})
	t.Run("principal user", func(t *testing.T) {
		id := userCert(t, ca, "u", "-n", "someone,"+u.Name)
		stdout, stderr, code := run(t, certArgs(id, h.Port, u.Name), "id -un")
		if code != 0 || stdout != u.Name+"\n" {
			t.Fatalf("exit %d, %q %q", code, stdout, stderr)
		}
	})
	for _, tc := range []struct {
		name, why string
		ca        string
		opts      []string
	}{
		{"another principal", "not in the set of valid principals", ca, []string{"-n", "someone"}},
		{"no principals", "names no principals", ca, nil},
		{"expired", "expired", ca, []string{"-n", "root", "-V", "20200101:20200102"}},
		{"not yet valid", "not yet valid", ca, []string{"-n", "root", "-V", "+1d:+2d"}},
		{"source-address elsewhere", "does not allow 127.", ca, []string{"-n", "root", "-O", "source-address=10.255.0.0/16,192.0.2.1"}},
		{"unknown critical option", "unsupported critical option", ca, []string{"-n", "root", "-O", "critical:gangway-test@example.com=x"}},
		{"untrusted CA", "unrecognized authority", other, []string{"-n", "root"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := userCert(t, tc.ca, "refused-"+tc.name, tc.opts...)
			stdout, stderr, code := run(t, certArgs(id, h.Port, "root"), "echo should-not-run")
			if code != 255 || stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want refused", code, stdout, stderr)
			}
			if !hasEntry(logs, "refused login", map[string]string{"reason": tc.why, "key_id": "refused-" + tc.name}) {
				t.Errorf("no refusal logged for %q", tc.why)
			}
		})
	}
	t.Run("source-address here", func(t *testing.T) {
		id := userCert(t, ca, "src", "-n", "root", "-O", "source-address=192.0.2.0/24,127.0.0.0/8")
		if stdout, stderr, code := run(t, certArgs(id, h.Port, "root"), "echo in"); code != 0 || stdout != "in\n" {
			t.Errorf("exit %d, %q %q", code, stdout, stderr)
		}
	})
	t.Run("force-command", func(t *testing.T) {
		id := userCert(t, ca, "forced", "-n", "root", "-O", `force-command=echo "forced:$SSH_ORIGINAL_COMMAND"`)
		if stdout, stderr, code := run(t, certArgs(id, h.Port, "root"), "echo hi"); code != 0 || stdout != "forced:echo hi\n" {
			t.Errorf("exec: exit %d, %q %q; want the forced command", code, stdout, stderr)
		}
		cl, err := dialAgent(h, certSigner(t, id))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ch, ok := subsystem(t, cl)
		defer ch.Close()
		if ok {
			t.Errorf("gangway subsystem with a forced command: accepted, want refused")
		}
	})
	t.Run("no-pty", func(t *testing.T) {
		id := userCert(t, ca, "nopty", "-n", "root", "-O", "no-pty")
		// ssh -tt gives up when the pty it insists on is refused.
		stdout, stderr, code := run(t, append(certArgs(id, h.Port, "root"), "-tt"), "tty")
		if code != 255 || stdout != "" || !strings.Contains(stderr, "PTY allocation request failed") {
			t.Errorf("exit %d, stdout %q, stderr %q; want the pty refused", code, stdout, stderr)
		}
		if stdout, stderr, code := run(t, certArgs(id, h.Port, "root"), "tty || true"); code != 0 || stdout != "not a tty\n" {
			t.Errorf("without -tt: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
	})
	t.Run("no trusted CA", func(t *testing.T) {
		c := agenttest.StartLocal(t, 1)
		h := c.Hosts[0]
		id := userCert(t, ca, "no-ca", "-n", "root")
		if _, stderr, code := sshRun(t, h, certArgs(id, h.Port, "root"), "", nil, "true"); code != 255 {
			t.Errorf("certificate accepted by an agent without --trusted-user-ca-keys: exit %d, %q", code, stderr)
		}
	})
}

// strictArgs are OpenSSH options that verify the host key against the
// known_hosts file kh (and no other).
func strictArgs(keys sshtest.Keys, port int, kh string) []string {
	return []string{
		"-F", "/dev/null", "-i", keys.ClientKey, "-p", strconv.Itoa(port),
		"-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=yes",
		"-o", "UserKnownHostsFile=" + kh, "-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
	}
}

// TestHostCertificate: OpenSSH's ssh verifies an agent's host
// certificate through a @cert-authority line alone, refuses it when the
// line names another CA, and still verifies the plain key against a
// plain known_hosts line.
func TestHostCertificate(t *testing.T) {
	t.Parallel()
	hostCA, other := newCA(t, "host-ca"), newCA(t, "other-ca")
	c := agenttest.StartLocal(t, 1, agenttest.WithHostCA(hostCA))
	h := c.Hosts[0]
	knownHosts := func(caPub string) string {
		kh := filepath.Join(t.TempDir(), "known_hosts")
		line := "@cert-authority [" + h.Addr + "]:" + strconv.Itoa(h.Port) + " " + string(must(os.ReadFile(caPub)))
		if err := os.WriteFile(kh, []byte(line), 0o600); err != nil {
			t.Fatal(err)
		}
		return kh
	}
	if stdout, stderr, code := sshRun(t, h, strictArgs(c.Keys, h.Port, knownHosts(hostCA+".pub")), "", nil, "echo in"); code != 0 || stdout != "in\n" {
		t.Errorf("@cert-authority of the host CA: exit %d, %q %q", code, stdout, stderr)
	}
	if stdout, stderr, code := sshRun(t, h, strictArgs(c.Keys, h.Port, knownHosts(other+".pub")), "", nil, "echo in"); code != 255 || !strings.Contains(stderr, "Host key verification failed") {
		t.Errorf("@cert-authority of another CA: exit %d, %q %q; want Host key verification failed", code, stdout, stderr)
	}
	if stdout, stderr, code := sshRun(t, h, strictArgs(c.Keys, h.Port, c.KnownHosts), "", nil, "echo in"); code != 0 || stdout != "in\n" {
		t.Errorf("plain known_hosts line: exit %d, %q %q", code, stdout, stderr)
	}
}

// TestLoadHostCert: a host certificate must be a host certificate of the
// host key, valid now.
func TestLoadHostCert(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "host-ca")
	dir := t.TempDir()
	key := filepath.Join(dir, "host_key")
	signer, err := sshd.LoadHostKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// sign certifies a copy of pub, so that every certificate has a file
	// of its own.
	sign := func(pub string, opts ...string) string {
		cp := filepath.Join(t.TempDir(), "key.pub")
		if err := os.WriteFile(cp, must(os.ReadFile(pub)), 0o644); err != nil {
			t.Fatal(err)
		}
		agenttest.SSHKeygen(t, append(append([]string{"-q", "-s", ca, "-I", "h"}, opts...), cp)...)
		return filepath.Join(filepath.Dir(cp), "key-cert.pub")
	}
	if _, cert, err := sshd.LoadHostCert(sign(key+".pub", "-h", "-n", "host1"), signer); err != nil || cert.ValidPrincipals[0] != "host1" {
		t.Fatalf("good certificate: %v", err)
	}
	other := filepath.Join(dir, "other")
	agenttest.SSHKeygen(t, "-q", "-t", "ed25519", "-N", "", "-f", other)
	for name, tc := range map[string]struct{ file, want string }{
		"user certificate": {sign(key+".pub", "-n", "host1"), "a user certificate"},
		"another key":      {sign(other+".pub", "-h", "-n", "host1"), "not the host key"},
		"expired":          {sign(key+".pub", "-h", "-n", "host1", "-V", "20200101:20200102"), "not valid now"},
		"plain key":        {key + ".pub", "not a certificate"},
	} {
		if _, _, err := sshd.LoadHostCert(tc.file, signer); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
