package sshd

import (
	"errors"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/account"
	"github.com/gangway-hpc/gangway/internal/jobcert"
	"github.com/gangway-hpc/gangway/internal/textx"
)

// authorizeJobCert checks a job certificate (jobcert): a relay agent
// logging in on the launcher's behalf for one job. It is accepted when
// the key K that signed it would log the user in without restriction (K
// is in one of the user's authorized_keys files, on a line with no
// options at all), its signature verifies, and it is what a job
// certificate must be (jobcert.Check: the one principal, validity and
// lifetime, force-command the gangway subsystem, source-address
// allowing the client). --trusted-user-ca-keys plays no part. The login
// may then open the gangway subsystem and nothing else (jobOnly).
func (s *Server) authorizeJobCert(c ssh.ConnMetadata, cert *ssh.Certificate, a *account.Account) (*loginInfo, *ssh.Permissions, error) {
	refuse := func(why string) (*loginInfo, *ssh.Permissions, error) {
		s.refused(c, cert, "job certificate: "+why, zap.String("key_id", textx.Clip(cert.KeyId)), zap.Uint64("serial", cert.Serial),
			zap.String("job_id", textx.Clip(jobcert.JobID(cert))), zap.String("signer_fingerprint", ssh.FingerprintSHA256(cert.SignatureKey)))
		return nil, nil, errors.New("job certificate: " + why)
	}
	var source, why string
	perms, err := checkJobCert(c, cert, func(k ssh.PublicKey) bool {
		source, why = s.jobSigner(c, a, k)
		return why == ""
	})
	if why != "" {
		return refuse(why)
	}
	if err != nil {
		return refuse(err.Error())
	}
	li := &loginInfo{
		method: "job-certificate", keyType: cert.Type(), fingerprint: ssh.FingerprintSHA256(cert.Key), source: source,
		keyID: cert.KeyId, serial: cert.Serial, ca: ssh.FingerprintSHA256(cert.SignatureKey),
		jobID: jobcert.JobID(cert), relay: jobcert.Relay(cert), jobOnly: true, noPTY: true,
	}
	return li, perms, nil
}

// checkJobCert checks cert as a job certificate signed by a key that
// authority accepts: its signature, validity and critical options
// (x/crypto's CertChecker, which enforces source-address), then what a
// job certificate must be (jobcert.Check). The critical options stay in
// the permissions, for x/crypto to enforce source-address on them too;
// force-command names no command, the gangway subsystem alone is what it
// means. Both the agent's server and an agent started by srun use it.
func checkJobCert(c ssh.ConnMetadata, cert *ssh.Certificate, authority func(ssh.PublicKey) bool) (*ssh.Permissions, error) {
	checker := ssh.CertChecker{IsUserAuthority: authority, SupportedCriticalOptions: []string{"force-command", "source-address"}}
	perms, err := checker.Authenticate(c, cert)
	if err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "ssh: "))
	}
	if err := jobcert.Check(cert, c.User(), c.RemoteAddr(), time.Now()); err != nil {
		return nil, err
	}
	return &ssh.Permissions{CriticalOptions: perms.CriticalOptions}, nil
}

// jobSigner finds the authorized_keys file whose line for k lets k sign
// job certificates for a's logins; else it says why not. The first file
// that holds k decides, as for a plain key (authorizeKey).
func (s *Server) jobSigner(c ssh.ConnMetadata, a *account.Account, k ssh.PublicKey) (source, why string) {
	key := string(k.Marshal())
	for _, f := range s.keyFiles(a) {
		b, err := readTrusted(f.path, f.uid, f.home)
		if err != nil {
			s.unreadable(f.path, c.User(), err)
			continue
		}
		line, ok := authorized(b)[key]
		if !ok {
			continue
		}
		if !line.plain {
			return "", "the key that signed it has options on its authorized_keys line in " + f.path + ", so it signs for nothing"
		}
		return f.path, ""
	}
	return "", "the key that signed it is not in the user's authorized_keys"
}
