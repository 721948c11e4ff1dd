package sshd

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/crypto/ssh"
)

// LoadHostKey reads an OpenSSH private key, or creates an ed25519 key
// (mode 0600) at path when none exists, so the agent keeps its identity
// across restarts. A key that group or others may access is refused
// (ErrHostKeyModes), as sshd refuses it.
func LoadHostKey(path string) (ssh.Signer, error) {
	b, err := readHostKey(path)
	if errors.Is(err, os.ErrNotExist) {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		blk, err := ssh.MarshalPrivateKey(priv, "gangway agent host key")
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("host key dir: %w", err)
		}
		b = pem.EncodeToMemory(blk)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return nil, fmt.Errorf("write host key: %w", err)
		}
		pub, _ := ssh.NewSignerFromKey(priv)
		if err := os.WriteFile(path+".pub", ssh.MarshalAuthorizedKey(pub.PublicKey()), 0o644); err != nil {
			return nil, fmt.Errorf("write host key: %w", err)
		}
	} else if err != nil {
		return nil, err
	}
	s, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("host key %s: %w", path, err)
	}
	return s, nil
}

// readHostKey reads the key file at path after checking its modes, on
// the file it opened (one lookup: the file checked is the file read).
func readHostKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("read host key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read host key: %w", err)
	}
	if err := checkHostKeyFile(path, fi); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read host key: %w", err)
	}
	return b, nil
}

// LoadHostCert reads a host certificate (the -cert.pub file that
// `ssh-keygen -s CA -h` writes) for key and returns the signer that
// presents it. The certificate must be a host certificate of key's
// public key and valid now.
func LoadHostCert(path string, key ssh.Signer) (ssh.Signer, *ssh.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read host certificate: %w", err)
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		return nil, nil, fmt.Errorf("host certificate %s: %w", path, err)
	}
	cert, ok := pub.(*ssh.Certificate)
	if !ok {
		return nil, nil, fmt.Errorf("host certificate %s: a plain %s key, not a certificate", path, pub.Type())
	}
	if cert.CertType != ssh.HostCert {
		return nil, nil, fmt.Errorf("host certificate %s: a user certificate; sign with ssh-keygen -s CA -h", path)
	}
	if string(cert.Key.Marshal()) != string(key.PublicKey().Marshal()) {
		return nil, nil, fmt.Errorf("host certificate %s certifies %s, not the host key %s", path, ssh.FingerprintSHA256(cert.Key), ssh.FingerprintSHA256(key.PublicKey()))
	}
	now := uint64(time.Now().Unix())
	if now < cert.ValidAfter || (cert.ValidBefore != ssh.CertTimeInfinity && now >= cert.ValidBefore) {
		return nil, nil, fmt.Errorf("host certificate %s is not valid now (valid from %s to %s)", path, certTime(cert.ValidAfter), certTime(cert.ValidBefore))
	}
	s, err := ssh.NewCertSigner(cert, key)
	if err != nil {
		return nil, nil, fmt.Errorf("host certificate %s: %w", path, err)
	}
	return s, cert, nil
}

func certTime(t uint64) string {
	if t == ssh.CertTimeInfinity {
		return "forever"
	}
	return time.Unix(int64(t), 0).UTC().Format(time.RFC3339)
}
