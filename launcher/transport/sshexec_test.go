package transport

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	"gangway/hostfile"
)

func TestSSHExecError(t *testing.T) {
	for _, tc := range []struct {
		msg, agentPath string
		permanent      bool
		want           string
	}{
		{"bash: line 1: /opt/gw/agent: No such file or directory", "/opt/gw/agent", true, "no agent binary at --agent-path /opt/gw/agent on the host"},
		{"sh: 1: /opt/gw/agent: not found", "/opt/gw/agent", true, "no agent binary at --agent-path /opt/gw/agent"},
		{"ssh: Could not resolve hostname nope: Name or service not known", "agent", true, "no such host (ssh said: ssh: Could not resolve hostname nope: Name or service not known)"},
		{"Host key verification failed.", "agent", true, "host key refused"},
		{"root@h: Permission denied (publickey).", "agent", true, "authentication refused"},
		{"ssh: connect to host h port 22: Connection refused", "agent", false, "ssh: ssh: connect to host h port 22: Connection refused"},
	} {
		err := sshExecError(tc.msg, tc.agentPath)
		if errors.Is(err, ErrPermanent) != tc.permanent || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v (permanent %v), want %q permanent %v", tc.msg, err, errors.Is(err, ErrPermanent), tc.want, tc.permanent)
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
