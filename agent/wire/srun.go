package wire

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// The srun transport (launcher --transport slurm) starts one `agent --srun`
// per node with one srun step. The launcher hands each agent a one-time
// public key through the step's environment (SrunKeyEnv); each agent
// listens on an ephemeral port with an ephemeral host key and prints one
// SrunReady line on its stdout, which srun carries back to the launcher
// (Slurm authenticates that channel with munge). The launcher then dials
// exactly that address and accepts exactly that host key.

// SrunKeyEnv holds the launcher's one-time public key in the environment
// of the agents its srun step starts, in authorized_keys format
// ("ssh-ed25519 AAAA...").
const SrunKeyEnv = "GANGWAY_SRUN_LAUNCHER_KEY"

// srunMagic starts every readiness line; srunFormat is its version.
const (
	srunMagic  = "gangway-agent-ready"
	srunFormat = "v1"
)

// SrunReady is what an agent started by srun tells the launcher:
//
//	gangway-agent-ready v1 NODE ADDR KEYTYPE KEY
//
// on one line, for example
//
//	gangway-agent-ready v1 cn1 198.18.196.2:40713 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI...
//
// NODE is the Slurm node name (SLURMD_NODENAME), ADDR the IP address and
// port the launcher dials (IPv6 in brackets), KEYTYPE and KEY the agent's
// host key as in an authorized_keys line.
type SrunReady struct {
	Node    string
	Addr    string // "IP:PORT"
	HostKey string // "KEYTYPE BASE64"
}

// String is the readiness line, without a newline.
func (r SrunReady) String() string {
	return strings.Join([]string{srunMagic, srunFormat, r.Node, r.Addr, r.HostKey}, " ")
}

// IsSrunReady reports whether line claims to be a readiness line (starts
// with the marker word); ParseSrunReady says whether it is a good one.
func IsSrunReady(line string) bool {
	f := strings.Fields(line)
	return len(f) > 0 && f[0] == srunMagic
}

// ErrSrunReady marks a readiness line that does not parse.
var ErrSrunReady = errors.New("bad agent readiness line")

// ParseSrunReady parses a readiness line strictly: exactly six fields
// separated by single spaces, the marker and format version, a node name of
// letters, digits and ".-_", an IP literal with a port in 1..65535, and a
// key type followed by standard base64. Surrounding white space (a "\r")
// is ignored.
func ParseSrunReady(line string) (SrunReady, error) {
	bad := func(format string, a ...any) (SrunReady, error) {
		return SrunReady{}, fmt.Errorf("%w: "+format, append([]any{ErrSrunReady}, a...)...)
	}
	line = strings.TrimSpace(line)
	f := strings.Split(line, " ")
	switch {
	case len(f) != 6:
		return bad("%d fields, want 6 (%s %s NODE ADDR KEYTYPE KEY)", len(f), srunMagic, srunFormat)
	case f[0] != srunMagic:
		return bad("starts with %q, want %q", f[0], srunMagic)
	case f[1] != srunFormat:
		return bad("format %q, this launcher reads %q", f[1], srunFormat)
	case !validNodeName(f[2]):
		return bad("node name %q", f[2])
	}
	host, port, err := net.SplitHostPort(f[3])
	if err != nil {
		return bad("address %q: %v", f[3], err)
	}
	if ip := net.ParseIP(host); ip == nil || strings.Contains(host, "%") {
		return bad("address %q: not an IP address", f[3])
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || strconv.Itoa(p) != port {
		return bad("address %q: port must be 1..65535", f[3])
	}
	if !validKeyType(f[4]) {
		return bad("key type %q", f[4])
	}
	if strings.Trim(f[5], "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") != "" {
		return bad("key is not base64")
	}
	if b, err := base64.StdEncoding.DecodeString(f[5]); err != nil || len(b) == 0 {
		return bad("key is not base64")
	}
	return SrunReady{Node: f[2], Addr: f[3], HostKey: f[4] + " " + f[5]}, nil
}

// validNodeName accepts Slurm node names: 1 to 255 letters, digits and
// ".-_", not starting with "-".
func validNodeName(s string) bool {
	if s == "" || len(s) > 255 || s[0] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// validKeyType accepts SSH key type names such as "ssh-ed25519" or
// "ecdsa-sha2-nistp256".
func validKeyType(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '@' || r == '.') {
			return false
		}
	}
	return true
}
