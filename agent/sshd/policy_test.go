package sshd

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/agent/account"
	"github.com/gangway-hpc/gangway/internal/jobcert"
)

// TestLoginPolicy: which user names may log in, as a table over a fake
// passwd database (the shells are real files: checkShell reads them).
func TestLoginPolicy(t *testing.T) {
	accounts := map[string]*account.Account{
		"root":  {Name: "root", Uid: 0, Gid: 0, Home: "/root", Shell: "/bin/sh"},
		"alice": {Name: "alice", Uid: 1000, Gid: 1000, Home: "/home/alice", Shell: "/bin/sh"},
		"bob":   {Name: "bob", Uid: 1001, Gid: 1001, Home: "/home/bob", Shell: "/bin/sh"},
		"svc":   {Name: "svc", Uid: 998, Gid: 998, Home: "/", Shell: "/usr/sbin/nologin"},
		"ghost": {Name: "ghost", Uid: 997, Gid: 997, Home: "/", Shell: "/nonexistent/shell"},
		"nosh":  {Name: "nosh", Uid: 996, Gid: 996, Home: "/", Shell: "/bin/false"},
	}
	lookup := func(name string) (*account.Account, error) {
		if a, ok := accounts[name]; ok {
			return a, nil
		}
		return nil, account.ErrUnknownUser
	}
	root, alice := accounts["root"], accounts["alice"]
	lone := &account.Account{Name: "1234", Uid: 1234, Gid: 1234, Home: "/", Shell: "/bin/sh"} // no passwd entry
	for _, tc := range []struct {
		name       string
		self       *account.Account
		permitRoot string
		allow      []string
		user       string
		why        string // "" = allowed
		banner     bool
	}{
		{"root agent, root", root, "", nil, "root", "", false},
		{"root agent, a user", root, "", nil, "alice", "", false},
		{"unknown user", root, "", nil, "mallory", "unknown user", false},
		{"nologin", root, "", nil, "svc", "refuses logins", false},
		{"false", root, "", nil, "nosh", "refuses logins", false},
		{"missing shell", root, "", nil, "ghost", "no such file", false},
		{"permit-root-login no", root, PermitRootNo, nil, "root", "--permit-root-login no", false},
		{"permit-root-login prohibit-password", root, PermitRootProhibitPassword, nil, "root", "", false},
		{"permit-root-login yes", root, PermitRootYes, nil, "root", "", false},
		{"allow-users lets in", root, "", []string{"bob", "al*"}, "alice", "", false},
		{"allow-users keeps out", root, "", []string{"bob"}, "alice", "not in --allow-users", false},
		{"allow-users covers root", root, "", []string{"bob"}, "root", "not in --allow-users", false},
		{"user agent, itself", alice, "", nil, "alice", "", false},
		{"user agent, root", alice, "", nil, "root", "the agent runs as alice", true},
		{"user agent, another user", alice, "", nil, "bob", "the agent runs as alice", true},
		{"user agent, unknown name", alice, "", nil, "mallory", "the agent runs as alice", true},
		{"user agent without a passwd entry", lone, "", nil, "1234", "", false},
	} {
		p := loginPolicy{self: tc.self, permitRoot: tc.permitRoot, allowUsers: tc.allow, lookup: lookup}
		a, r := p.account(tc.user)
		switch {
		case tc.why == "" && r != nil:
			t.Errorf("%s: refused: %s", tc.name, r.why)
		case tc.why == "" && a == nil:
			t.Errorf("%s: no account", tc.name)
		case tc.why != "" && r == nil:
			t.Errorf("%s: allowed, want refused (%s)", tc.name, tc.why)
		case tc.why != "" && !strings.Contains(r.why, tc.why):
			t.Errorf("%s: refused because %q, want %q", tc.name, r.why, tc.why)
		case tc.why != "" && (r.banner != "") != tc.banner:
			t.Errorf("%s: banner %q, want one: %v", tc.name, r.banner, tc.banner)
		}
	}
}

func TestParsePermitRootLogin(t *testing.T) {
	for in, want := range map[string]string{"yes": "yes", "no": "no", "prohibit-password": "prohibit-password", "without-password": "prohibit-password", "": "", "maybe": ""} {
		got, err := ParsePermitRootLogin(in)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("ParsePermitRootLogin(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestSourceAllowed: a certificate's source-address is checked as
// OpenSSH's sshd checks it: a list with a bad entry (a space, a name)
// allows nobody, even an address an earlier entry matches (ssh-keygen
// writes no such list).
func TestSourceAllowed(t *testing.T) {
	addr := &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 5555}
	for _, tc := range []struct {
		list string
		ok   bool
	}{
		{"10.0.0.0/8", true},
		{"192.168.0.0/16,10.1.2.3", true},
		{"192.168.0.0/16,10.1.2.0/24", true},
		{"192.168.0.0/16, 10.1.2.0/24", false},
		{"10.1.2.0/24,not-an-address", false},
		{"10.1.2.4", false},
		{"192.168.0.0/16", false},
		{"not-an-address", false},
	} {
		if err := jobcert.SourceAllows(tc.list, addr); (err == nil) != tc.ok {
			t.Errorf("source-address %q for %v: %v, want allowed %v", tc.list, addr.IP, err, tc.ok)
		}
	}
}

// TestReadTrustedSticky: a key file under a root-owned sticky directory
// (/tmp) in a private directory passes; a group-writable directory on
// the way does not, and the error names it.
func TestReadTrustedSticky(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the files must belong to root or the agent's user; run as root")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "keys")
	if err := os.WriteFile(path, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readTrusted(path, 0, ""); err != nil {
		t.Fatalf("private file in a private dir under the temp dir: %v", err)
	}
	if err := os.Chmod(dir, 0o770); err != nil {
		t.Fatal(err)
	}
	_, err := readTrusted(path, 0, "")
	var ue *UnsafeError
	if !errors.As(err, &ue) || ue.Path != dir || !strings.Contains(ue.Why, "writable by group or others") {
		t.Errorf("group-writable dir: %v, want an UnsafeError naming %s", err, dir)
	}
}
