package sshtest_test

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
)

func TestGenKeys(t *testing.T) {
	dir := t.TempDir()
	k, err := sshtest.GenKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{k.ClientKey, k.HostKey} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", p, fi.Mode().Perm())
		}
		pem, _ := os.ReadFile(p)
		if !strings.HasPrefix(string(pem), "-----BEGIN OPENSSH PRIVATE KEY-----") {
			t.Errorf("%s is not an OpenSSH private key", p)
		}
	}
	for priv, signer := range map[string]ssh.Signer{k.ClientKey: k.ClientSigner, k.HostKey: k.HostSigner} {
		pem, _ := os.ReadFile(priv)
		parsed, err := ssh.ParsePrivateKey(pem)
		if err != nil {
			t.Fatalf("parse %s: %v", priv, err)
		}
		pubText, _ := os.ReadFile(priv + ".pub")
		pub, _, _, _, err := ssh.ParseAuthorizedKey(pubText)
		if err != nil {
			t.Fatalf("parse %s.pub: %v", priv, err)
		}
		if pub.Type() != ssh.KeyAlgoED25519 || string(pub.Marshal()) != string(parsed.PublicKey().Marshal()) ||
			string(pub.Marshal()) != string(signer.PublicKey().Marshal()) {
			t.Errorf("%s: private key, .pub and signer disagree", priv)
		}
	}
	ak, _ := os.ReadFile(k.AuthorizedKeys)
	pub, _, _, rest, err := ssh.ParseAuthorizedKey(ak)
	if err != nil || len(rest) != 0 || string(pub.Marshal()) != string(k.ClientSigner.PublicKey().Marshal()) {
		t.Errorf("authorized_keys %q does not hold exactly the client key (%v)", ak, err)
	}
	if k.AuthorizedKeys != filepath.Join(dir, "authorized_keys") || k.HostPub != filepath.Join(dir, "host_ed25519.pub") {
		t.Errorf("paths %+v", k)
	}
}

func TestKnownHosts(t *testing.T) {
	k, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	text := k.KnownHosts([]string{"198.18.200.1", "198.18.200.2"}, 2222)
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	hostPub := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k.HostSigner.PublicKey())))
	want := []string{"[198.18.200.1]:2222 " + hostPub, "[198.18.200.2]:2222 " + hostPub}
	if !slices.Equal(lines, want) {
		t.Errorf("KnownHosts:\n%s\nwant:\n%s", text, strings.Join(want, "\n"))
	}
	if got := k.KnownHosts([]string{"198.18.200.1"}, 22); got != "198.18.200.1 "+hostPub+"\n" {
		t.Errorf("port 22: %q", got)
	}
	path, err := k.WriteKnownHosts([]string{"198.18.200.1"}, 2222)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := knownhosts.New(path)
	if err != nil {
		t.Fatal(err)
	}
	addr := &net.TCPAddr{IP: net.ParseIP("198.18.200.1"), Port: 2222}
	if err := cb("198.18.200.1:2222", addr, k.HostSigner.PublicKey()); err != nil {
		t.Errorf("host key rejected: %v", err)
	}
	if err := cb("198.18.200.1:2222", addr, k.ClientSigner.PublicKey()); err == nil {
		t.Error("wrong key accepted")
	}
}

func TestSSHArgs(t *testing.T) {
	k := sshtest.Keys{ClientKey: "/k/id_ed25519"}
	got := sshtest.SSHArgs(k, 2222)
	want := []string{"-F", "/dev/null", "-i", "/k/id_ed25519", "-p", "2222",
		"-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "KexAlgorithms=curve25519-sha256", "-o", "ConnectTimeout=10"}
	if !slices.Equal(got, want) {
		t.Errorf("SSHArgs = %q\nwant %q", got, want)
	}
}
