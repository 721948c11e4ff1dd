package sshd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/account"
	"github.com/gangway-hpc/gangway/internal/jobcert"
	"github.com/gangway-hpc/gangway/internal/textx"
)

// loginInfo is what authentication learnt about a connection; it rides
// in the connection's ssh.Permissions.ExtraData under loginKey.
type loginInfo struct {
	account *account.Account
	method  string // "publickey", "certificate" or "job-certificate"
	keyType string
	// fingerprint is the SHA256 fingerprint of the client's key (for a
	// certificate, of the key it certifies).
	fingerprint string
	// source is the authorized_keys file that holds the key (for a job
	// certificate, the key that signed it).
	source string
	// For certificates: its key ID and serial, and its CA's fingerprint
	// (for a job certificate, that of the user's key that signed it).
	keyID  string
	serial uint64
	ca     string
	// For job certificates: the job and the relay named in the key ID.
	// jobOnly: the login may open the gangway subsystem and nothing else.
	jobID, relay string
	jobOnly      bool
	// forceCommand is the certificate's force-command: stock sessions run
	// it instead of what the client asks, and the gangway subsystem is
	// refused.
	forceCommand string
	// noPTY: the certificate lacks the permit-pty extension.
	noPTY bool
}

type loginKeyType struct{}

var loginKey loginKeyType

// loginOf returns what authentication stored in the permissions.
func loginOf(p *ssh.Permissions) *loginInfo {
	if p == nil {
		return nil
	}
	li, _ := p.ExtraData[loginKey].(*loginInfo)
	return li
}

// authorize is the server's PublicKeyCallback: the user's policy first
// (loginPolicy), then the key in the user's authorized_keys files, or the
// certificate against --trusted-user-ca-keys.
func (s *Server) authorize(c ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
	a, r := s.policy.account(c.User())
	if r != nil {
		s.refused(c, key, r.why)
		if r.banner != "" {
			return nil, &ssh.BannerError{Err: errors.New(r.why), Message: r.banner}
		}
		return nil, errors.New(r.why)
	}
	var li *loginInfo
	var perms *ssh.Permissions
	var err error
	if cert, ok := key.(*ssh.Certificate); ok {
		li, perms, err = s.authorizeCert(c, cert, a)
	} else {
		li, err = s.authorizeKey(c, key, a)
		perms = &ssh.Permissions{}
	}
	if err != nil {
		return nil, err
	}
	li.account = a
	perms.ExtraData = map[any]any{loginKey: li}
	return perms, nil
}

// keyFile is an authorized_keys file and the user whose logins it grants.
type keyFile struct {
	path string
	uid  uint32
	home string // StrictModes checks stop here
}

// keyFiles are the authorized_keys files that may let a log in: the
// user's own ~/.ssh/authorized_keys (sshd's default), and, when a is the
// agent's own user, the agent's --authorized-keys file.
func (s *Server) keyFiles(a *account.Account) []keyFile {
	own := filepath.Join(a.Home, ".ssh", "authorized_keys")
	files := []keyFile{{own, a.Uid, a.Home}}
	if s.AuthorizedKeys != "" && a.Uid == s.policy.self.Uid && filepath.Clean(s.AuthorizedKeys) != own {
		files = append(files, keyFile{s.AuthorizedKeys, s.policy.self.Uid, s.policy.self.Home})
	}
	return files
}

func (s *Server) authorizeKey(c ssh.ConnMetadata, key ssh.PublicKey, a *account.Account) (*loginInfo, error) {
	k := string(key.Marshal())
	for _, f := range s.keyFiles(a) {
		b, err := readTrusted(f.path, f.uid, f.home)
		if err != nil {
			s.unreadable(f.path, c.User(), err)
			continue
		}
		line, ok := authorized(b)[k]
		if !ok {
			continue
		}
		if bad := line.unenforced; bad != "" {
			s.refused(c, key, "its authorized_keys option "+textx.Clip(bad)+" cannot be enforced by the agent", zap.String("file", f.path))
			return nil, fmt.Errorf("public key for %q has option %s, which the agent cannot enforce", c.User(), bad)
		}
		return &loginInfo{method: "publickey", keyType: key.Type(), fingerprint: ssh.FingerprintSHA256(key), source: f.path}, nil
	}
	s.refused(c, key, "unknown public key")
	return nil, fmt.Errorf("unknown public key for %q", c.User())
}

// unreadable logs why a key file was not used: a missing file quietly
// (most users have none), an unsafe one as a warning naming the path.
func (s *Server) unreadable(path, user string, err error) {
	if errors.Is(err, os.ErrNotExist) {
		s.Log.Debug("no authorized_keys file", zap.String("file", path), zap.String("user", textx.Clip(user)))
		return
	}
	if suppressed, ok := s.authLog.allow(); ok {
		var ue *UnsafeError
		msg := "cannot read an authorized_keys file; ignoring it"
		if errors.As(err, &ue) {
			msg = "ignoring an authorized_keys file others could have written (StrictModes)"
		}
		s.Log.Warn(msg, zap.String("file", path), zap.String("user", textx.Clip(user)), zap.Error(err), zap.Int("suppressed", suppressed))
	}
}

// authorizeCert checks a user certificate: a job certificate as
// authorizeJobCert says, any other signed by a CA of
// --trusted-user-ca-keys, naming the user among its principals (a
// certificate without principals is refused, as sshd does), within its
// validity, from an address its source-address allows, with no critical
// option the agent does not know (force-command and source-address are
// honoured).
func (s *Server) authorizeCert(c ssh.ConnMetadata, cert *ssh.Certificate, a *account.Account) (*loginInfo, *ssh.Permissions, error) {
	refuse := func(why string) (*loginInfo, *ssh.Permissions, error) {
		s.refused(c, cert, why, zap.String("key_id", textx.Clip(cert.KeyId)), zap.Uint64("serial", cert.Serial))
		return nil, nil, errors.New(why)
	}
	if jobcert.Is(cert) {
		return s.authorizeJobCert(c, cert, a)
	}
	if s.TrustedUserCAKeys == "" {
		return refuse("certificate offered, but the agent trusts no CA (--trusted-user-ca-keys)")
	}
	self := s.policy.self
	b, err := readTrusted(s.TrustedUserCAKeys, self.Uid, self.Home)
	if err != nil {
		s.unreadable(s.TrustedUserCAKeys, c.User(), err)
		return refuse("cannot read --trusted-user-ca-keys")
	}
	cas := publicKeys(b)
	if len(cert.ValidPrincipals) == 0 {
		return refuse("certificate names no principals")
	}
	checker := ssh.CertChecker{
		IsUserAuthority:          func(k ssh.PublicKey) bool { return cas[string(k.Marshal())] },
		SupportedCriticalOptions: []string{"force-command"},
	}
	perms, err := checker.Authenticate(c, cert)
	if err != nil {
		return refuse(strings.TrimPrefix(err.Error(), "ssh: "))
	}
	if sa, ok := cert.CriticalOptions["source-address"]; ok {
		if err := jobcert.SourceAllows(sa, c.RemoteAddr()); err != nil {
			return refuse(err.Error())
		}
	}
	li := &loginInfo{
		method: "certificate", keyType: cert.Type(), fingerprint: ssh.FingerprintSHA256(cert.Key),
		keyID: cert.KeyId, serial: cert.Serial, ca: ssh.FingerprintSHA256(cert.SignatureKey),
		forceCommand: cert.CriticalOptions["force-command"],
	}
	if _, ok := perms.Extensions["permit-pty"]; !ok {
		li.noPTY = true
	}
	// The critical options stay in the permissions: x/crypto enforces
	// source-address on them too.
	return li, &ssh.Permissions{CriticalOptions: perms.CriticalOptions}, nil
}

// refused logs a refused login, rate-limited.
func (s *Server) refused(c ssh.ConnMetadata, key ssh.PublicKey, why string, extra ...zap.Field) {
	suppressed, ok := s.authLog.allow()
	if !ok {
		return
	}
	fp := ""
	if cert, ok := key.(*ssh.Certificate); ok {
		fp = ssh.FingerprintSHA256(cert.Key)
	} else if key != nil {
		fp = ssh.FingerprintSHA256(key)
	}
	fields := append([]zap.Field{zap.String("remote", c.RemoteAddr().String()), zap.String("user", textx.Clip(c.User())),
		zap.String("fingerprint", fp), zap.String("reason", why), zap.Int("suppressed", suppressed)}, extra...)
	s.Log.Info("refused login", fields...)
}

// keyLine is what an authorized_keys line says of its key.
type keyLine struct {
	// unenforced is "" when the key may log in, or the first option of
	// its line that the agent cannot enforce (command=, from=, restrict,
	// no-pty...): such a key is refused rather than given the full
	// access its line means to deny.
	unenforced string
	// plain: the line has no options at all. Only such a key signs job
	// certificates: any option, even no-port-forwarding, restricts it.
	plain bool
}

// authorized parses authorized_keys text into a map keyed by the
// marshalled public key; the first line of a key decides, as in sshd.
func authorized(b []byte) map[string]keyLine {
	keys := map[string]keyLine{}
	for len(b) > 0 {
		pub, _, opts, rest, err := ssh.ParseAuthorizedKey(b)
		if err != nil {
			break // no more keys (comments and blank lines are skipped by the parser)
		}
		k := string(pub.Marshal())
		if _, dup := keys[k]; !dup {
			keys[k] = keyLine{unenforced: unenforced(opts), plain: len(opts) == 0}
		}
		b = rest
	}
	return keys
}

// publicKeys parses a file of public keys (--trusted-user-ca-keys, in
// authorized_keys format) into a set keyed by the marshalled key. Lines
// with options are ignored.
func publicKeys(b []byte) map[string]bool {
	keys := map[string]bool{}
	for len(b) > 0 {
		pub, _, opts, rest, err := ssh.ParseAuthorizedKey(b)
		if err != nil {
			break
		}
		if len(opts) == 0 {
			keys[string(pub.Marshal())] = true
		}
		b = rest
	}
	return keys
}

// unenforced returns the first option the agent cannot honour. The
// allowed ones only take away what the agent never offers.
func unenforced(opts []string) string {
	for _, o := range opts {
		switch strings.ToLower(o) {
		case "no-port-forwarding", "no-agent-forwarding", "no-x11-forwarding", "no-user-rc":
		default:
			return o
		}
	}
	return ""
}
