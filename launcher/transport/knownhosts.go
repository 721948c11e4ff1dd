package transport

// The launcher's side of host authentication: known_hosts read as
// OpenSSH reads it, host keys and host certificates checked against it,
// new host keys recorded with --accept-new-host-keys.

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// hostKeyError is a refused host key.
type hostKeyError struct {
	Host, Fingerprint string
	Mismatch          bool
	// CertOnly: the only lines for the host are @cert-authority lines,
	// and it offered a plain key.
	CertOnly   bool
	KnownHosts string
}

func (e *hostKeyError) Error() string {
	if e.CertOnly {
		return fmt.Sprintf("host %s offered a plain key (%s), but %s trusts only host certificates for it (a @cert-authority line): give its agent --host-cert with a certificate that CA signed for this name, or it is not the host it claims to be", e.Host, e.Fingerprint, e.KnownHosts)
	}
	if e.Mismatch {
		return fmt.Sprintf("HOST KEY MISMATCH for %s: it offered %s, which differs from the key in %s; if the host was reinstalled, remove its line from that file", e.Host, e.Fingerprint, e.KnownHosts)
	}
	return fmt.Sprintf("unknown host key for %s (%s): not in %s; verify it and add it, or pass --accept-new-host-keys", e.Host, e.Fingerprint, e.KnownHosts)
}

// khFile is one known_hosts file, parsed once per launch (re-read
// after we add a key): with a thousand hosts, parsing the file per host
// under khMu was a launcher-side O(hosts^2).
type khFile struct {
	path    string
	kh      ssh.HostKeyCallback // nil until first use
	err     error
	caLines map[int]bool // the file's @cert-authority lines
}

// knownHostsFile is path's khFile; the caller holds khMu.
func (d *AgentDialer) knownHostsFile(path string) *khFile {
	if d.khFiles == nil {
		d.khFiles = map[string]*khFile{}
	}
	kf := d.khFiles[path]
	if kf == nil {
		kf = &khFile{path: path}
		d.khFiles[path] = kf
	}
	return kf
}

// load returns the parsed file; the caller holds khMu.
func (kf *khFile) load(log *zap.Logger) (ssh.HostKeyCallback, error) {
	if kf.kh == nil && kf.err == nil {
		kf.kh, kf.caLines, kf.err = loadKnownHosts(kf.path, log)
	}
	return kf.kh, kf.err
}

// hostKeyAlgorithms is the order in which the host at hostname is asked
// for its key (see "Host certificates" below), by known_hosts file
// khPath. Hosts with the same known key types share one order: callers
// must not change it.
func (d *AgentDialer) hostKeyAlgorithms(khPath, hostname string, remote net.Addr) []string {
	d.khMu.Lock()
	defer d.khMu.Unlock()
	kf := d.knownHostsFile(khPath)
	cb, err := kf.load(d.log)
	if err != nil {
		cb = nil
	}
	types, ca := knownFor(cb, kf.caLines, hostname, remote)
	// One order per set of known key types, made once: the launch asks
	// for every host (a relay's link to each child carries it), and the
	// hosts of a cluster share one or two sets.
	key := fmt.Sprint(ca, types)
	if algos, ok := d.hkaMemo[key]; ok {
		return algos
	}
	algos := hostKeyAlgorithms(types, ca)
	if d.hkaMemo == nil {
		d.hkaMemo = map[string][]string{}
	}
	if len(d.hkaMemo) < 64 {
		d.hkaMemo[key] = algos
	}
	return algos
}

// hostKeyCallback checks host keys against the default known_hosts file
// (--known-hosts, else ~/.ssh/known_hosts), recording new ones with
// --accept-new-host-keys.
func (d *AgentDialer) hostKeyCallback() ssh.HostKeyCallback {
	return d.hostKeyCallbackFor(d.khPath, d.cfg.AcceptNewHosts)
}

// hostKeyCallbackFor checks host keys against known_hosts file khPath;
// acceptNew records a key seen for the first time there (a changed key
// is refused all the same).
func (d *AgentDialer) hostKeyCallbackFor(khPath string, acceptNew bool) ssh.HostKeyCallback {
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		d.khMu.Lock()
		defer d.khMu.Unlock()
		kf := d.knownHostsFile(khPath)
		cb, err := kf.load(d.log)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("read %s: %w", khPath, err)
		}
		if err == nil {
			err = cb(hostname, remote, key)
			if err == nil {
				return nil
			}
		} else {
			err = &knownhosts.KeyError{}
		}
		var ke *knownhosts.KeyError
		fp := ssh.FingerprintSHA256(key)
		if cert, ok := key.(*ssh.Certificate); ok {
			// Only a CA's line can vouch for a certificate; a host is asked
			// for one only when such a line matches it (hostKeyAlgorithms).
			return Permanent(&hostCertError{Host: hostname, CA: ssh.FingerprintSHA256(cert.SignatureKey), KnownHosts: khPath, Err: err})
		}
		if errors.As(err, &ke) && len(ke.Want) > 0 {
			// Refused in an mpi-operator pod too: a @cert-authority line
			// is how a worker's name is kept from whoever answers on it.
			return Permanent(&hostKeyError{Host: hostname, Fingerprint: fp, Mismatch: true, CertOnly: onlyCA(ke.Want, kf.caLines), KnownHosts: khPath})
		}
		if !errors.As(err, &ke) {
			return err
		}
		if d.cfg.MPIOperator && !acceptNew {
			// As the operator's images have ssh do (NewAgentDialer warned).
			d.log.Debug("accepting an unknown host key (mpi-operator)", zap.String("host", hostname), zap.String("fingerprint", fp))
			return nil
		}
		if !acceptNew {
			return Permanent(&hostKeyError{Host: hostname, Fingerprint: fp, KnownHosts: khPath})
		}
		line := knownhosts.Line([]string{knownhosts.Normalize(hostname)}, key)
		if err := os.MkdirAll(filepath.Dir(khPath), 0o700); err != nil {
			return err
		}
		f, err := os.OpenFile(khPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return fmt.Errorf("record host key: %w", err)
		}
		defer f.Close()
		_, err = fmt.Fprintln(f, line)
		kf.kh, kf.err = nil, nil // re-read with the new key next time
		d.log.Info("trusting new host key", zap.String("host", hostname), zap.String("fingerprint", fp), zap.String("known_hosts", khPath))
		return err
	}
}

// Host certificates: an agent may present a certificate signed by a host
// CA beside its plain key; a known_hosts line
//
//	@cert-authority PATTERN CA-PUBLIC-KEY
//
// trusts every host matching PATTERN whose certificate that CA signed for
// the name the launcher dials, so a reinstalled host or a restarted pod
// with a new key needs no known_hosts edit. Which kind of key a host is
// asked for decides which check applies (x/crypto's knownhosts checks a
// certificate only against @cert-authority lines), so the launcher orders
// the host key algorithms per host as OpenSSH's ssh does: the types of
// the host's known plain keys first, then certificates; certificates
// first when only a CA vouches for the host; plain keys first when
// nothing is known of it (so that --accept-new-host-keys can record one).

// probeKey is a key no known_hosts line holds: checking it against the
// file yields every line that matches a host (knownhosts.KeyError.Want).
var probeKey = sync.OnceValue(func() ssh.PublicKey {
	k, err := ssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))
	if err != nil {
		panic(err)
	}
	return k
})

// knownFor returns the types of the plain keys known_hosts holds for the
// host, and whether a @cert-authority line matches it. caLines are the
// numbers of the file's @cert-authority lines.
func knownFor(cb ssh.HostKeyCallback, caLines map[int]bool, hostname string, remote net.Addr) (types []string, ca bool) {
	if cb == nil {
		return nil, false
	}
	var ke *knownhosts.KeyError
	if !errors.As(cb(hostname, remote, probeKey()), &ke) {
		return nil, false
	}
	for _, k := range ke.Want {
		if caLines[k.Line] {
			ca = true
		} else if !slices.Contains(types, k.Key.Type()) {
			types = append(types, k.Key.Type())
		}
	}
	return types, ca
}

// onlyCA reports whether every line in want is a @cert-authority line.
func onlyCA(want []knownhosts.KnownKey, caLines map[int]bool) bool {
	for _, k := range want {
		if !caLines[k.Line] {
			return false
		}
	}
	return len(want) > 0
}

// hostKeyAlgorithms orders the host key algorithms for a host with known
// plain keys of types, or vouched for by a CA.
func hostKeyAlgorithms(types []string, ca bool) []string {
	var certs, known, other []string
	for _, a := range supportedHostKeys() {
		switch {
		case isCertAlgo(a):
			certs = append(certs, a)
		case slices.Contains(types, keyFormat(a)):
			known = append(known, a)
		default:
			other = append(other, a)
		}
	}
	switch {
	case len(known) > 0:
		return slices.Concat(known, certs, other)
	case ca:
		return slices.Concat(certs, other)
	default:
		return slices.Concat(other, certs)
	}
}

// supportedHostKeys is x/crypto's list, which it builds anew at each call.
var supportedHostKeys = sync.OnceValue(func() []string { return ssh.SupportedAlgorithms().HostKeys })

func isCertAlgo(a string) bool { return strings.Contains(a, "-cert-v01@") }

// keyFormat is the key type (PublicKey.Type) a plain signature algorithm
// uses.
func keyFormat(algo string) string {
	switch algo {
	case ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSASHA512:
		return ssh.KeyAlgoRSA
	}
	return algo
}

// caLineNumbers returns the numbers of the @cert-authority lines.
func caLineNumbers(lines []string) map[int]bool {
	ca := map[int]bool{}
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "@cert-authority") {
			ca[i+1] = true
		}
	}
	return ca
}

// hostCertError is a host certificate the launcher does not trust.
type hostCertError struct {
	Host       string
	CA         string // fingerprint of the CA that signed it
	KnownHosts string
	Err        error
}

func (e *hostCertError) Error() string {
	return fmt.Sprintf("untrusted host certificate for %s (signed by CA %s): %v; trust the CA with a '@cert-authority HOSTS CA-KEY' line in %s, and check the certificate's principals (the names the launcher dials) and validity",
		e.Host, e.CA, strings.TrimPrefix(e.Err.Error(), "ssh: "), e.KnownHosts)
}

func (e *hostCertError) Unwrap() error { return e.Err }

// readKnownHosts parses a known_hosts file as OpenSSH does: a line that
// does not parse is skipped with a warning naming the file and the line,
// and the others still count. The callback it returns looks hosts up by
// name (khIndex).
func readKnownHosts(path string, log *zap.Logger) (ssh.HostKeyCallback, error) {
	cb, _, err := loadKnownHosts(path, log)
	return cb, err
}

// loadKnownHosts reads path once: readKnownHosts' callback, and the
// numbers of its @cert-authority lines.
func loadKnownHosts(path string, log *zap.Logger) (ssh.HostKeyCallback, map[int]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	lines := strings.Split(string(b), "\n")
	// Drop one bad line at a time (knownhosts names the first), for at
	// most as many rounds as there are lines.
	for round := 0; ; round++ {
		cb, err := indexKnownHosts(path, lines)
		if err == nil {
			return cb, caLineNumbers(lines), nil
		}
		n, ok := badLine(err)
		if !ok || n < 1 || n > len(lines) || round == len(lines) {
			return nil, nil, err
		}
		log.Warn("skipping a known_hosts line that does not parse", zap.String("file", path), zap.Int("line", n), zap.Error(err))
		lines[n-1] = "# " + lines[n-1] // keeps the numbering of the rest
	}
}

// badLine finds N in knownhosts' "knownhosts: FILE:N: ..." parse errors.
func badLine(err error) (int, bool) {
	msg := err.Error()
	for i := strings.Index(msg, ":"); i >= 0; {
		rest := msg[i+1:]
		j := strings.Index(rest, ":")
		if j < 0 {
			return 0, false
		}
		if n, err := strconv.Atoi(rest[:j]); err == nil {
			return n, true
		}
		i += 1 + j
	}
	return 0, false
}

// knownHostsFrom builds a callback from lines through a private
// temporary file (knownhosts reads files only); its errors name the file
// the lines came from, name.
func knownHostsFrom(name string, lines []string) (ssh.HostKeyCallback, error) {
	f, err := os.CreateTemp("", "gangway-known-hosts-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(strings.Join(lines, "\n"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	cb, err := knownhosts.New(f.Name())
	if err != nil {
		return nil, errors.New(strings.ReplaceAll(err.Error(), f.Name(), name))
	}
	return cb, nil
}
