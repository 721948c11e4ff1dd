// Package jobcert makes and checks job certificates: the authority a
// launcher delegates to a relay agent, for one job, to log in to the
// relay's children as the job's user (docs/tree.md, "Trust").
//
// A job certificate is an OpenSSH user certificate of an ephemeral
// ed25519 key, signed by one of the user's own keys K: one principal
// (the user), a validity bounded by the job, the critical options
// force-command (the gangway subsystem only) and source-address (the
// relay's addresses), no extensions, and a key ID that names the job.
// An agent accepts it where K itself would log the user in without
// restriction (agent/sshd).
//
// The package is a leaf: it imports only the standard library and
// x/crypto/ssh, and it does not log.
package jobcert

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// KeyIDPrefix starts the key ID of every job certificate: "gangway-job:<job id>:<relay host>".
const KeyIDPrefix = "gangway-job:"

// ForceCommand is the critical option force-command of a job certificate: a login with it may open the gangway subsystem only.
const ForceCommand = "gangway-subsystem"

// MaxLifetime bounds a job certificate's validity (ValidBefore - ValidAfter); longer ones are refused.
const MaxLifetime = 8 * 24 * time.Hour

// The critical options of a job certificate.
const (
	optForceCommand  = "force-command"
	optSourceAddress = "source-address"
)

// backdate is how far before Spec.Now a certificate becomes valid, for
// hosts whose clocks are a little behind the launcher's.
const backdate = time.Minute

// maxLifetime is the longest Spec.Lifetime New grants: with the
// backdating, the validity stays under MaxLifetime with a minute to
// spare for rounding to seconds.
const maxLifetime = MaxLifetime - 2*time.Minute

// Spec says what a job certificate is for.
type Spec struct {
	User     string // the one principal
	JobID    string
	Relay    string        // the relay host's name, for the key ID and logs
	Sources  []string      // the relay's addresses (IPs, or CIDRs): the critical option source-address
	Lifetime time.Duration // from Now; capped at MaxLifetime - 2*time.Minute
	Now      time.Time
}

// Bundle is what travels to a relay: an ephemeral key and its certificates.
type Bundle struct {
	Key   []byte   // the ephemeral ed25519 private key, OpenSSH PEM (ssh.MarshalPrivateKey)
	Certs [][]byte // one ssh.Certificate (Marshal()) per user key that signed it
}

// New makes one ephemeral ed25519 key and, for each of signers (the
// user's own keys: -i, ssh-agent's, ~/.ssh/id_*), a user certificate of
// it signed by that key: principal s.User, ValidAfter Now-1min,
// ValidBefore Now+Lifetime, critical options force-command=ForceCommand
// and source-address=strings.Join(Sources, ","), no extensions (no pty,
// no forwarding), key ID KeyIDPrefix+JobID+":"+Relay, a random serial.
// RSA signers sign with rsa-sha2-512. Errors: no signers, no sources, a
// bad spec, or no signer that signed (a signer that fails is skipped
// while others work).
func New(rand io.Reader, signers []ssh.Signer, s Spec) (Bundle, error) {
	if err := s.check(); err != nil {
		return Bundle{}, err
	}
	if len(signers) == 0 {
		return Bundle{}, errors.New("job certificate: no key of the user to sign it with")
	}
	lifetime := min(s.Lifetime, maxLifetime)
	now := s.Now
	if now.IsZero() {
		now = time.Now()
	}
	pub, priv, err := ed25519.GenerateKey(rand)
	if err != nil {
		return Bundle{}, fmt.Errorf("job certificate: generate its key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		return Bundle{}, fmt.Errorf("job certificate: encode its key: %w", err)
	}
	key, err := ssh.NewPublicKey(pub)
	if err != nil {
		return Bundle{}, fmt.Errorf("job certificate: %w", err)
	}
	b := Bundle{Key: pem.EncodeToMemory(block)}
	var errs []error
	for _, signer := range signers {
		c, err := sign(rand, signer, key, s, now, lifetime)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b.Certs = append(b.Certs, c.Marshal())
	}
	if len(b.Certs) == 0 {
		return Bundle{}, fmt.Errorf("job certificate: none of the user's %d keys signed it: %w", len(signers), errors.Join(errs...))
	}
	return b, nil
}

// check refuses a Spec New could not make a certificate of that Check
// would pass.
func (s Spec) check() error {
	switch {
	case s.User == "":
		return errors.New("job certificate: no user")
	case s.JobID == "" || strings.Contains(s.JobID, ":"):
		return fmt.Errorf("job certificate: job id %q: want a non-empty id without ':'", s.JobID)
	case len(s.Sources) == 0:
		return errors.New("job certificate: no source addresses for the relay")
	case s.Lifetime <= 0:
		return fmt.Errorf("job certificate: lifetime %v: want a positive one", s.Lifetime)
	}
	for _, a := range s.Sources {
		if err := checkSource(a); err != nil {
			return fmt.Errorf("job certificate: %w", err)
		}
	}
	return nil
}

// sign certifies key with signer as s says.
func sign(rand io.Reader, signer ssh.Signer, key ssh.PublicKey, s Spec, now time.Time, lifetime time.Duration) (*ssh.Certificate, error) {
	kt := signer.PublicKey().Type()
	if kt == ssh.KeyAlgoRSA {
		as, ok := signer.(ssh.AlgorithmSigner)
		if !ok {
			return nil, fmt.Errorf("%s key %s cannot sign with rsa-sha2-512", kt, ssh.FingerprintSHA256(signer.PublicKey()))
		}
		ms, err := ssh.NewSignerWithAlgorithms(as, []string{ssh.KeyAlgoRSASHA512})
		if err != nil {
			return nil, fmt.Errorf("%s key %s: %w", kt, ssh.FingerprintSHA256(signer.PublicKey()), err)
		}
		signer = ms
	}
	var serial [8]byte
	if _, err := io.ReadFull(rand, serial[:]); err != nil {
		return nil, fmt.Errorf("serial: %w", err)
	}
	c := &ssh.Certificate{
		Key:             key,
		Serial:          binary.BigEndian.Uint64(serial[:]),
		CertType:        ssh.UserCert,
		KeyId:           KeyIDPrefix + s.JobID + ":" + s.Relay,
		ValidPrincipals: []string{s.User},
		ValidAfter:      uint64(now.Add(-backdate).Unix()),
		ValidBefore:     uint64(now.Add(lifetime).Unix()),
		Permissions: ssh.Permissions{CriticalOptions: map[string]string{
			optForceCommand:  ForceCommand,
			optSourceAddress: strings.Join(s.Sources, ","),
		}},
	}
	if err := c.SignCert(rand, signer); err != nil {
		return nil, fmt.Errorf("%s key %s: %w", kt, ssh.FingerprintSHA256(signer.PublicKey()), err)
	}
	return c, nil
}

// Signers parses a Bundle (as received from the launcher) into ssh
// client signers (ssh.NewCertSigner), one per certificate; a bundle
// whose certificates do not certify its key is an error.
func (b Bundle) Signers() ([]ssh.Signer, error) {
	key, err := ssh.ParsePrivateKey(b.Key)
	if err != nil {
		return nil, fmt.Errorf("job certificate bundle: its key: %w", err)
	}
	if len(b.Certs) == 0 {
		return nil, errors.New("job certificate bundle: no certificates")
	}
	pub := key.PublicKey().Marshal()
	signers := make([]ssh.Signer, 0, len(b.Certs))
	for i, cb := range b.Certs {
		pk, err := ssh.ParsePublicKey(cb)
		if err != nil {
			return nil, fmt.Errorf("job certificate bundle: certificate %d: %w", i, err)
		}
		cert, ok := pk.(*ssh.Certificate)
		switch {
		case !ok:
			return nil, fmt.Errorf("job certificate bundle: certificate %d is a plain %s key", i, pk.Type())
		case !Is(cert):
			return nil, fmt.Errorf("job certificate bundle: certificate %d is not a job certificate (key ID %q)", i, clip(cert.KeyId))
		case !bytes.Equal(cert.Key.Marshal(), pub):
			return nil, fmt.Errorf("job certificate bundle: certificate %d certifies another key than the bundle's", i)
		}
		s, err := ssh.NewCertSigner(cert, key)
		if err != nil {
			return nil, fmt.Errorf("job certificate bundle: certificate %d: %w", i, err)
		}
		signers = append(signers, s)
	}
	return signers, nil
}

// Is says whether cert claims to be a job certificate (its key ID starts with KeyIDPrefix).
func Is(cert *ssh.Certificate) bool {
	return cert != nil && strings.HasPrefix(cert.KeyId, KeyIDPrefix)
}

// JobID returns the job id from a job certificate's key ID ("" if none).
func JobID(cert *ssh.Certificate) string {
	if !Is(cert) {
		return ""
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(cert.KeyId, KeyIDPrefix), ":")
	return id
}

// Relay returns the relay host named in a job certificate's key ID (""
// if none).
func Relay(cert *ssh.Certificate) string {
	if !Is(cert) {
		return ""
	}
	_, relay, _ := strings.Cut(strings.TrimPrefix(cert.KeyId, KeyIDPrefix), ":")
	return relay
}

// Check verifies what a job certificate must be, apart from who signed
// it: a user certificate; principals exactly [user]; within validity at
// now; lifetime <= MaxLifetime; critical options exactly
// force-command=ForceCommand and a non-empty source-address that allows
// remote (IPs and CIDRs, comma-separated); no other critical option. The
// signature itself is checked by the caller (ssh.CertChecker). Errors
// say which rule failed, in a few words.
func Check(cert *ssh.Certificate, user string, remote net.Addr, now time.Time) error {
	switch {
	case cert == nil:
		return errors.New("no certificate")
	case !Is(cert):
		return fmt.Errorf("key ID %q does not name a job", clip(cert.KeyId))
	case cert.CertType != ssh.UserCert:
		return errors.New("not a user certificate")
	case len(cert.ValidPrincipals) != 1 || cert.ValidPrincipals[0] != user:
		return fmt.Errorf("principals %q are not exactly [%q]", clipAll(cert.ValidPrincipals), clip(user))
	}
	after, before := int64(cert.ValidAfter), int64(cert.ValidBefore)
	switch t := now.Unix(); {
	case cert.ValidBefore == ssh.CertTimeInfinity:
		return fmt.Errorf("valid forever, longer than %v", MaxLifetime)
	case after < 0 || t < after:
		return errors.New("not yet valid")
	case before < 0 || t >= before:
		return errors.New("expired")
	case before-after > int64(MaxLifetime/time.Second):
		return fmt.Errorf("valid for %ds, longer than %v", before-after, MaxLifetime)
	}
	for o := range cert.CriticalOptions {
		if o != optForceCommand && o != optSourceAddress {
			return fmt.Errorf("critical option %q is not a job certificate's", clip(o))
		}
	}
	if fc, ok := cert.CriticalOptions[optForceCommand]; !ok || fc != ForceCommand {
		return fmt.Errorf("force-command %q is not %q", clip(fc), ForceCommand)
	}
	sa := cert.CriticalOptions[optSourceAddress]
	if sa == "" {
		return errors.New("no source-address")
	}
	return SourceAllows(sa, remote)
}

// SourceAllows checks a certificate's source-address list (IPs and CIDR
// blocks, comma-separated, no spaces, as ssh-keygen writes them) against
// the client's address, as OpenSSH's sshd does: a bad entry refuses the
// whole list, wherever it stands. The agent's check of every
// certificate, job certificates or a site CA's, is this one.
func SourceAllows(list string, remote net.Addr) error {
	ta, ok := remote.(*net.TCPAddr)
	if !ok || ta == nil {
		return fmt.Errorf("source-address: cannot check a client address %v", remote)
	}
	allowed := false
	for _, s := range strings.Split(list, ",") {
		if err := checkSource(s); err != nil {
			return fmt.Errorf("source-address: %w", err)
		}
		if ip := net.ParseIP(s); ip != nil {
			allowed = allowed || ip.Equal(ta.IP)
			continue
		}
		_, n, _ := net.ParseCIDR(s)
		allowed = allowed || n.Contains(ta.IP)
	}
	if !allowed {
		return fmt.Errorf("source-address %s does not allow %s", clip(list), ta.IP)
	}
	return nil
}

// checkSource says whether s is an IP address or a CIDR block.
func checkSource(s string) error {
	if net.ParseIP(s) != nil {
		return nil
	}
	if _, _, err := net.ParseCIDR(s); err != nil {
		return fmt.Errorf("bad source address %q: want an IP address or a CIDR block", clip(s))
	}
	return nil
}

// maxErrString is how much of a string from a certificate an error
// quotes.
const maxErrString = 64

// clip shortens a string from a certificate for an error.
func clip(s string) string {
	if len(s) <= maxErrString {
		return s
	}
	return s[:maxErrString] + "..."
}

func clipAll(ss []string) []string {
	const most = 4
	out := make([]string, 0, min(len(ss), most+1))
	for i, s := range ss {
		if i == most {
			out = append(out, fmt.Sprintf("...(%d more)", len(ss)-most))
			break
		}
		out = append(out, clip(s))
	}
	return out
}
