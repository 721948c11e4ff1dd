package transport

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/hostfile"
)

func TestSSHExecError(t *testing.T) {
	for _, tc := range []struct {
		msg, agentPath string
		permanent      bool
		unreachable    bool
		want           string
	}{
		{"bash: line 1: /opt/gw/agent: No such file or directory", "/opt/gw/agent", true, false, "no agent binary at --agent-path /opt/gw/agent on the host"},
		{"sh: 1: /opt/gw/agent: not found", "/opt/gw/agent", true, false, "no agent binary at --agent-path /opt/gw/agent"},
		{"ssh: Could not resolve hostname nope: Name or service not known", "agent", true, false, "no such host (ssh said: ssh: Could not resolve hostname nope: Name or service not known)"},
		{"Host key verification failed.", "agent", true, false, "host key refused"},
		{"root@h: Permission denied (publickey).", "agent", true, false, "authentication refused"},
		{"ssh: connect to host h port 22: Connection refused", "agent", false, true, "ssh: ssh: connect to host h port 22: Connection refused"},
		{"ssh: connect to host h port 22: No route to host", "agent", false, true, "No route to host"},
		{"Connection closed by 10.0.0.1 port 22", "agent", false, false, "Connection closed"},
	} {
		err := sshExecError(tc.msg, tc.agentPath)
		if errors.Is(err, ErrPermanent) != tc.permanent || errors.Is(err, ErrUnreachable) != tc.unreachable || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v (permanent %v, unreachable %v), want %q permanent %v unreachable %v", tc.msg, err,
				errors.Is(err, ErrPermanent), errors.Is(err, ErrUnreachable), tc.want, tc.permanent, tc.unreachable)
		}
	}
}

func TestRemotePath(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"agent", "'agent'"},
		{"/opt/gangway/bin/agent", "'/opt/gangway/bin/agent'"},
		{"/opt/my dir/agent; rm -rf /", "'/opt/my dir/agent; rm -rf /'"},
		{"~/bin/agent", "~/'bin/agent'"},
		{"~user/agent", "'~user/agent'"},
		{"it's/agent", `'it'\''s/agent'`},
	} {
		if got := remotePath(tt.in); got != tt.want {
			t.Errorf("remotePath(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// TestSSHExecPeerName: with --transport ssh the system ssh resolves an
// alias itself; the other hosts get the HostName behind it, from -F, or
// from a -F in --ssh's words.
func TestSSHExecPeerName(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "my config")
	if err := os.WriteFile(cfg, []byte("Host node1\n HostName 198.18.30.3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{
		{SSHConfig: cfg, SSHCommand: "ssh"},
		{SSHCommand: "ssh -F '" + cfg + "' -o LogLevel=ERROR"},
	} {
		d, err := newSSHExec(o, nil, false, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		pn := d.(*sshExec)
		if got := pn.PeerName(hostfile.Host{Name: "node1"}); got != "198.18.30.3" {
			t.Errorf("%+v: PeerName(node1) = %q, want 198.18.30.3", o, got)
		}
		if got := pn.PeerName(hostfile.Host{Name: "node2"}); got != "node2" {
			t.Errorf("%+v: PeerName(node2) = %q, want node2", o, got)
		}
	}
}
