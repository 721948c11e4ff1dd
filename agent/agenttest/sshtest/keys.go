// Package sshtest makes throwaway SSH identities for tests and benchmarks:
// a client key authorised to log in and a host key (GenKeys), known_hosts
// text for them, and the OpenSSH client options that reach a server with
// them (SSHArgs). The agent's own tests, the network-namespace harness
// (cmd/internal/testbed) and gwbench share it.
//
// It imports no gangway package and not package testing, so the bench
// binary can use it.
package sshtest

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Keys is a client key pair authorised to log in, and a host key pair,
// written by GenKeys.
type Keys struct {
	Dir            string
	ClientKey      string // id_ed25519, OpenSSH format, mode 0600
	ClientPub      string // id_ed25519.pub
	AuthorizedKeys string // authorized_keys holding the client key
	HostKey        string // host_ed25519, mode 0600
	HostPub        string // host_ed25519.pub

	// Signers for Go clients and servers (x/crypto/ssh).
	ClientSigner ssh.Signer
	HostSigner   ssh.Signer
}

// GenKeys writes fresh ed25519 client and host key pairs and an
// authorized_keys file into dir, which must exist.
func GenKeys(dir string) (Keys, error) {
	k := Keys{
		Dir:            dir,
		ClientKey:      filepath.Join(dir, "id_ed25519"),
		ClientPub:      filepath.Join(dir, "id_ed25519.pub"),
		AuthorizedKeys: filepath.Join(dir, "authorized_keys"),
		HostKey:        filepath.Join(dir, "host_ed25519"),
		HostPub:        filepath.Join(dir, "host_ed25519.pub"),
	}
	var err error
	if k.ClientSigner, err = writeKeyPair(k.ClientKey, k.ClientPub, "gangway-testbed-client"); err != nil {
		return Keys{}, err
	}
	if k.HostSigner, err = writeKeyPair(k.HostKey, k.HostPub, "gangway-testbed-host"); err != nil {
		return Keys{}, err
	}
	ak := ssh.MarshalAuthorizedKey(k.ClientSigner.PublicKey())
	if err := os.WriteFile(k.AuthorizedKeys, ak, 0o600); err != nil {
		return Keys{}, fmt.Errorf("write authorized_keys: %w", err)
	}
	return k, nil
}

func writeKeyPair(privPath, pubPath, comment string) (ssh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate %s: %w", privPath, err)
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return nil, fmt.Errorf("marshal %s: %w", privPath, err)
	}
	if err := os.WriteFile(privPath, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, fmt.Errorf("write private key: %w", err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, fmt.Errorf("signer for %s: %w", privPath, err)
	}
	pub := strings.TrimSuffix(string(ssh.MarshalAuthorizedKey(signer.PublicKey())), "\n")
	if err := os.WriteFile(pubPath, []byte(pub+" "+comment+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("write public key: %w", err)
	}
	return signer, nil
}

// KnownHosts returns known_hosts text with one line per address, each
// trusting the host key at [addr]:port (plain addr for port 22, as OpenSSH
// writes it). WriteKnownHosts writes it to a file.
func (k Keys) KnownHosts(addrs []string, port int) string {
	var s strings.Builder
	for _, a := range addrs {
		hp := knownhosts.Normalize(fmt.Sprintf("[%s]:%d", a, port))
		s.WriteString(knownhosts.Line([]string{hp}, k.HostSigner.PublicKey()))
		s.WriteByte('\n')
	}
	return s.String()
}

// WriteKnownHosts writes KnownHosts(addrs, port) to Dir/known_hosts and
// returns the file's path, for `ssh -o UserKnownHostsFile=<path>` or
// knownhosts.New.
func (k Keys) WriteKnownHosts(addrs []string, port int) (string, error) {
	path := filepath.Join(k.Dir, "known_hosts")
	if err := os.WriteFile(path, []byte(k.KnownHosts(addrs, port)), 0o644); err != nil {
		return "", fmt.Errorf("write known_hosts: %w", err)
	}
	return path, nil
}

// SSHArgs returns the OpenSSH client options every test and benchmark uses
// to reach an sshd or agent that authorises keys' client key: -F /dev/null
// first so no user config interferes, keys' client key only, no host key
// checking or prompts, and curve25519-sha256, the only key exchange a
// testbed sshd offers.
func SSHArgs(keys Keys, port int) []string {
	return []string{
		"-F", "/dev/null",
		"-i", keys.ClientKey,
		"-p", strconv.Itoa(port),
		"-o", "IdentitiesOnly=yes",
		"-o", "StrictHostKeyChecking=no",
		"-o", "UserKnownHostsFile=/dev/null",
		"-o", "LogLevel=ERROR",
		"-o", "BatchMode=yes",
		"-o", "KexAlgorithms=curve25519-sha256",
		"-o", "ConnectTimeout=10",
	}
}
