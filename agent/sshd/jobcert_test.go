package sshd_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/agenttest"
	"github.com/gangway-hpc/gangway/agent/sshd"
	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/jobcert"
)

// loopback is the client address of every job certificate login here:
// dialJob binds it, so that source-address has one address to match.
var loopback = net.IPv4(127, 0, 0, 1)

// jobSpec is a job certificate for root from loopback.
func jobSpec() jobcert.Spec {
	return jobcert.Spec{User: "root", JobID: "feedc0de", Relay: "relay1", Sources: []string{"127.0.0.1"}, Lifetime: time.Hour, Now: time.Now()}
}

// jobSigner makes a job certificate signed by userKey as s says, edited
// by mutate (then signed again by signBy, userKey when nil), and returns
// it as a client signer.
func jobSigner(t *testing.T, userKey ssh.Signer, s jobcert.Spec, mutate func(*ssh.Certificate), signBy ssh.Signer) ssh.Signer {
	t.Helper()
	b, err := jobcert.New(rand.Reader, []ssh.Signer{userKey}, s)
	if err != nil {
		t.Fatal(err)
	}
	if mutate == nil {
		signers, err := b.Signers()
		if err != nil {
			t.Fatal(err)
		}
		return signers[0]
	}
	pk, err := ssh.ParsePublicKey(b.Certs[0])
	if err != nil {
		t.Fatal(err)
	}
	cert := pk.(*ssh.Certificate)
	mutate(cert)
	if signBy == nil {
		signBy = userKey
	}
	if err := cert.SignCert(rand.Reader, signBy); err != nil {
		t.Fatal(err)
	}
	key, err := ssh.ParsePrivateKey(b.Key)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := ssh.NewCertSigner(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// dialJob logs in to h as root from 127.0.0.1 with signer.
func dialJob(t *testing.T, h *agenttest.Host, signer ssh.Signer) (*ssh.Client, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), agenttest.Deadline)
	defer cancel()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: loopback}}
	conn, err := d.DialContext(ctx, "tcp", h.HostPort())
	if err != nil {
		t.Fatal(err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	c, chans, reqs, err := ssh.NewClientConn(conn, h.HostPort(), &ssh.ClientConfig{
		User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.FixedHostKey(h.HostPub),
	})
	if err != nil {
		conn.Close()
		return nil, err
	}
	return ssh.NewClient(c, chans, reqs), nil
}

// newKey is a fresh ed25519 signer.
func newKey(t *testing.T) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// writeCAFile writes ca's public key as a --trusted-user-ca-keys file.
func writeCAFile(t *testing.T, ca ssh.Signer) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "user_ca.pub")
	if err := os.WriteFile(f, ssh.MarshalAuthorizedKey(ca.PublicKey()), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestJobCertificates: a job certificate signed by a key of the user's
// authorized_keys, on a line without options, logs in and opens the
// gangway subsystem and nothing else; every rule of a job certificate
// refuses the login once; a CA-signed certificate logs in as before.
func TestJobCertificates(t *testing.T) {
	agenttest.RequireRoot(t)
	t.Parallel()
	ca := newKey(t)
	obs, logs := observed()
	c := agenttest.StartLocal(t, 1, withServer(obs, func(s *sshd.Server) { s.TrustedUserCAKeys = writeCAFile(t, ca) }))
	h, userKey := c.Hosts[0], c.Keys.ClientSigner

	t.Run("accepted", func(t *testing.T) {
		cl, err := dialJob(t, h, jobSigner(t, userKey, jobSpec(), nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		refusedAll(t, cl, h, logs)
		// The agent logs the login before it accepts a channel.
		if !hasEntry(logs, "login", map[string]string{"method": "job-certificate", "job_id": "feedc0de", "relay": "relay1",
			"signer_fingerprint": ssh.FingerprintSHA256(userKey.PublicKey()), "file": c.Keys.AuthorizedKeys}) {
			t.Errorf("no login line naming the job, relay and signing key: %v", logs.FilterMessage("login").All())
		}
		helloFacts(t, cl) // last: the end of a launcher session closes its connection
	})

	badKey := newKey(t)
	for _, tc := range []struct {
		name   string
		edit   func(*jobcert.Spec)
		mutate func(*ssh.Certificate)
		signBy ssh.Signer
		why    string
	}{
		{name: "signer not in authorized_keys", signBy: badKey, mutate: func(*ssh.Certificate) {}, why: "not in the user's authorized_keys"},
		{name: "signed by the user CA", signBy: ca, mutate: func(*ssh.Certificate) {}, why: "not in the user's authorized_keys"},
		{name: "bad signature", mutate: func(c *ssh.Certificate) {}, signBy: nil, why: "signature does not verify"},
		{name: "expired", mutate: func(c *ssh.Certificate) { c.ValidAfter, c.ValidBefore = 1_600_000_000, 1_600_003_600 }, why: "expired"},
		{name: "not yet valid", edit: func(s *jobcert.Spec) { s.Now = time.Now().Add(time.Hour) }, why: "not yet valid"},
		{name: "another principal", edit: func(s *jobcert.Spec) { s.User = "nobody" }, why: "not in the set of valid principals"},
		{name: "two principals", mutate: func(c *ssh.Certificate) { c.ValidPrincipals = []string{"root", "nobody"} }, why: "not exactly"},
		{name: "source-address elsewhere", edit: func(s *jobcert.Spec) { s.Sources = []string{"127.0.0.2", "198.18.0.0/24"} }, why: "does not allow 127.0.0.1"},
		{name: "extra critical option", mutate: func(c *ssh.Certificate) { c.CriticalOptions["verify-required"] = "" }, why: "unsupported critical option"},
		{name: "another force-command", mutate: func(c *ssh.Certificate) { c.CriticalOptions["force-command"] = "/bin/sh" }, why: `force-command "/bin/sh"`},
		{name: "lifetime over the most", mutate: func(c *ssh.Certificate) {
			c.ValidBefore = c.ValidAfter + uint64(jobcert.MaxLifetime/time.Second) + 1
		}, why: "longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := jobSpec()
			s.JobID = "refused" + strings.ReplaceAll(tc.name, " ", "-")
			if tc.edit != nil {
				tc.edit(&s)
			}
			signer := jobSigner(t, userKey, s, tc.mutate, tc.signBy)
			if tc.name == "bad signature" {
				// Sign with the user's key, then change what was signed.
				cert := signer.PublicKey().(*ssh.Certificate)
				cert.KeyId += "x"
			}
			if cl, err := dialJob(t, h, signer); err == nil {
				cl.Close()
				t.Fatal("accepted")
			}
			if !hasEntry(logs, "refused login", map[string]string{"reason": tc.why, "job_id": s.JobID}) {
				t.Errorf("no refusal logged for %q", tc.why)
			}
		})
	}

	t.Run("CA certificate", func(t *testing.T) {
		cert := &ssh.Certificate{Key: newKey(t).PublicKey(), CertType: ssh.UserCert, KeyId: "alice@laptop", ValidPrincipals: []string{"root"},
			ValidAfter: uint64(time.Now().Add(-time.Minute).Unix()), ValidBefore: uint64(time.Now().Add(time.Hour).Unix()),
			Permissions: ssh.Permissions{Extensions: map[string]string{"permit-pty": ""}}}
		key := newKey(t)
		cert.Key = key.PublicKey()
		if err := cert.SignCert(rand.Reader, ca); err != nil {
			t.Fatal(err)
		}
		cs, err := ssh.NewCertSigner(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := dialJob(t, h, cs)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		out, err := runOn(cl, "echo in")
		if err != nil || out != "in\n" {
			t.Errorf("exec with a CA certificate: %q, %v", out, err)
		}
	})
}

// TestJobCertificateSignerOptions: a key whose authorized_keys line has
// any option, even one a plain login with it accepts, signs no job
// certificate; the agent needs no --trusted-user-ca-keys for them.
func TestJobCertificateSignerOptions(t *testing.T) {
	agenttest.RequireRoot(t)
	t.Parallel()
	obs, logs := observed()
	c := agenttest.StartLocal(t, 1, withServer(obs))
	h, userKey := c.Hosts[0], c.Keys.ClientSigner
	k := newKey(t)
	plain := authLine(userKey) + "\n"
	for _, opt := range []string{`from="127.0.0.0/8"`, "no-pty", `command="gangway-subsystem"`, "no-port-forwarding", "restrict"} {
		if err := os.WriteFile(c.Keys.AuthorizedKeys, []byte(plain+opt+" "+authLine(k)+"\n"+authLine(k)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		s := jobSpec()
		s.JobID = "opt" + strings.NewReplacer("=", "", `"`, "", "/", "", ".", "").Replace(opt)
		if cl, err := dialJob(t, h, jobSigner(t, k, s, nil, nil)); err == nil {
			cl.Close()
			t.Errorf("job certificate signed by a key with %s accepted", opt)
		}
		if !hasEntry(logs, "refused login", map[string]string{"reason": "has options on its authorized_keys line", "job_id": s.JobID}) {
			t.Errorf("%s: no refusal logged", opt)
		}
	}
	// The same key on a line of its own signs, without any user CA.
	if err := os.WriteFile(c.Keys.AuthorizedKeys, []byte(plain+authLine(k)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cl, err := dialJob(t, h, jobSigner(t, k, jobSpec(), nil, nil))
	if err != nil {
		t.Fatalf("job certificate of a key on a plain line: %v", err)
	}
	defer cl.Close()
	helloFacts(t, cl)
}

// helloFacts opens the gangway subsystem and has the agent answer a
// hello with its facts.
func helloFacts(t *testing.T, cl *ssh.Client) {
	t.Helper()
	ch, ok := subsystem(t, cl)
	defer ch.Close()
	if !ok {
		t.Fatal("gangway subsystem refused")
	}
	conn := wire.NewConn(ch)
	if err := conn.Send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "feedc0de", Host: "child1"}); err != nil {
		t.Fatal(err)
	}
	if m, err := conn.Recv(); err != nil || m.Kind != wire.KindFacts {
		t.Fatalf("after hello: %v %v", m.Kind, err)
	}
}

// refusedAll: a job certificate's login gets no command, shell, pty,
// environment, other subsystem or forwarding.
func refusedAll(t *testing.T, cl *ssh.Client, h *agenttest.Host, logs *observer.ObservedLogs) {
	t.Helper()
	session := func(try func(*ssh.Session) error) error {
		s, err := cl.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		return try(s)
	}
	for name, try := range map[string]func(*ssh.Session) error{
		"exec id":    func(s *ssh.Session) error { return s.Start("id") },
		"shell":      func(s *ssh.Session) error { return s.Shell() },
		"pty":        func(s *ssh.Session) error { return s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}) },
		"env":        func(s *ssh.Session) error { return s.Setenv("LANG", "C") },
		"sftp":       func(s *ssh.Session) error { return s.RequestSubsystem("sftp") },
		"exec after": func(s *ssh.Session) error { _ = s.Setenv("LANG", "C"); return s.Start("true") },
	} {
		if err := session(try); err == nil {
			t.Errorf("%s: accepted under a job certificate", name)
		}
	}
	if !hasEntry(logs, "refused request: a job certificate opens the gangway subsystem only", map[string]string{"request": "exec", "job_id": "feedc0de"}) {
		t.Error("no refused exec logged")
	}
	if !hasEntry(logs, "refused subsystem: a job certificate opens the gangway subsystem only", map[string]string{"name": "sftp"}) {
		t.Error("no refused sftp subsystem logged")
	}
	_, err := cl.Dial("tcp", h.HostPort())
	var oe *ssh.OpenChannelError
	if !errors.As(err, &oe) {
		t.Errorf("direct-tcpip: %v, want refused", err)
	}
}

// runOn runs command in a new session of cl and returns its stdout.
func runOn(cl *ssh.Client, command string) (string, error) {
	s, err := cl.NewSession()
	if err != nil {
		return "", err
	}
	defer s.Close()
	var out bytes.Buffer
	s.Stdout = &out
	err = s.Run(command)
	return out.String(), err
}

// TestJobCertificateOpenSSH: OpenSSH's ssh, given the ephemeral key and
// its job certificate, opens the gangway subsystem and talks the
// protocol; a command is refused.
func TestJobCertificateOpenSSH(t *testing.T) {
	agenttest.RequireRoot(t)
	t.Parallel()
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("no ssh client")
	}
	c := agenttest.StartLocal(t, 1)
	h := c.Hosts[0]
	s := jobSpec()
	s.Sources = []string{"127.0.0.0/8"} // ssh picks its own source address
	b, err := jobcert.New(rand.Reader, []ssh.Signer{c.Keys.ClientSigner}, s)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	id := filepath.Join(dir, "job_ed25519")
	pk, err := ssh.ParsePublicKey(b.Certs[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(id, b.Key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(id+"-cert.pub", ssh.MarshalAuthorizedKey(pk), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-F", "/dev/null", "-i", id, "-o", "CertificateFile=" + id + "-cert.pub", "-p", strconv.Itoa(h.Port), "-l", "root",
		"-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"}

	if stdout, stderr, code := sshRun(t, h, args, "", nil, "id"); code != 255 || stdout != "" || !strings.Contains(stderr, "exec request failed") {
		t.Errorf("ssh ... id: exit %d, stdout %q, stderr %q; want the exec refused", code, stdout, stderr)
	}

	var hello bytes.Buffer
	if err := wire.NewConn(nopCloser{&hello}).Send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "feedc0de", Host: "child1"}); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := sshRun(t, h, append(args, "-s"), hello.String(), nil, wire.Subsystem)
	m, err := wire.NewConn(nopCloser{bytes.NewBufferString(stdout)}).Recv()
	if err != nil || m.Kind != wire.KindFacts {
		t.Errorf("ssh -s %s: exit %d, stderr %q; first frame %v, %v; want the agent's facts", wire.Subsystem, code, stderr, m.Kind, err)
	}
}

// nopCloser makes a buffer a wire stream.
type nopCloser struct{ io.ReadWriter }

func (nopCloser) Close() error { return nil }

// BenchmarkJobCertLogin: what a login costs the agent and the client
// with a plain authorized key and with a job certificate that key
// signed (the extra authorized_keys lookup and certificate checks),
// connection set-up included.
func BenchmarkJobCertLogin(b *testing.B) {
	agenttest.RequireRoot(b)
	c := agenttest.StartLocal(b, 1)
	h, userKey := c.Hosts[0], c.Keys.ClientSigner
	bundle, err := jobcert.New(rand.Reader, []ssh.Signer{userKey}, jobSpec())
	if err != nil {
		b.Fatal(err)
	}
	signers, err := bundle.Signers()
	if err != nil {
		b.Fatal(err)
	}
	for name, signer := range map[string]ssh.Signer{"key": userKey, "jobcert": signers[0]} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				cl, err := dialAgent(h, signer)
				if err != nil {
					b.Fatal(err)
				}
				cl.Close()
			}
		})
	}
}
