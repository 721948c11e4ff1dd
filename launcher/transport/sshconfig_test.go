package transport

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// writeSSHConfig writes a user config (and a system one) under a fresh
// home and points SystemSSHConfig at the latter for the test.
func writeSSHConfig(t *testing.T, user, system string) (home string) {
	t.Helper()
	home = t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if user != "" {
		if err := os.WriteFile(filepath.Join(home, ".ssh", "config"), []byte(user), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sys := filepath.Join(t.TempDir(), "ssh_config")
	if system != "" {
		if err := os.WriteFile(sys, []byte(system), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := SystemSSHConfig
	SystemSSHConfig = sys
	t.Cleanup(func() { SystemSSHConfig = old })
	return home
}

// A laptop's configuration, as users write it.
const userConfig = `# laptop
Host jump bastion
    HostName 198.18.30.1
    User alice
    IdentityFile ~/.ssh/id_jump
    ProxyJump none

Host node? !node9
    ProxyJump jump
    User bob
    IdentityFile %d/.ssh/id_%r
    IdentityFile ~/.ssh/id_%h

Host node1
    HostName 198.18.30.11
    Port 2200
Host node2
    HostName=198.18.30.12
    User carol
Host twohop
    HostName 10.0.0.%n
    ProxyJump jump,ssh://dave@inner:2022
Host strict
    StrictHostKeyChecking accept-new
    UserKnownHostsFile ~/kh /other
    ConnectTimeout 7
    IdentitiesOnly yes
    ServerAliveCountMax 6
Match host node1
    User mallory
Host *
    ServerAliveInterval 30
    User everyone
`

const systemConfig = `Host *
    SendEnv LANG LC_*
    Port 2222
    IdentityFile /etc/ssh/id_all
`

func TestResolveSSHConfig(t *testing.T) {
	home := writeSSHConfig(t, userConfig, systemConfig)
	c, err := loadSSHConfig("", home, "me")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings %q, want none", c.Warnings)
	}
	agent := hostDefaults{DefUser: "me", DefPort: 22122}
	id := func(n string) string { return filepath.Join(home, ".ssh", n) }
	cases := []resolveCase{
		{"alias with HostName and Port; first User wins; Match host is decided on the HostName, which is not node1", "node1", agent, hostConfig{
			Alias: "node1", HostName: "198.18.30.11", Port: 2200, User: "bob",
			IdentityFiles: []string{id("id_bob"), id("id_198.18.30.11"), "/etc/ssh/id_all"},
			Jumps:         []jumpHost{{Host: "jump"}}}},
		{"HostName= form; the first User (node?) wins over a later block's", "node2", agent, hostConfig{
			Alias: "node2", HostName: "198.18.30.12", Port: 2222, User: "bob",
			IdentityFiles: []string{id("id_bob"), id("id_198.18.30.12"), "/etc/ssh/id_all"},
			Jumps:         []jumpHost{{Host: "jump"}}}},
		{"matched as given, as ssh does (ssh -G NODE2 reads no node? block)", "NODE2", agent, hostConfig{
			Alias: "NODE2", HostName: "NODE2", Port: 2222, User: "everyone",
			IdentityFiles: []string{"/etc/ssh/id_all"}}},
		{"negated pattern", "node9", agent, hostConfig{
			Alias: "node9", HostName: "node9", Port: 2222, User: "everyone",
			IdentityFiles: []string{"/etc/ssh/id_all"}}},
		{"the host list's user and port win", "node1", hostDefaults{User: "erin", Port: 3000, FlagPort: 4000, DefUser: "me", DefPort: 22122}, hostConfig{
			Alias: "node1", HostName: "198.18.30.11", Port: 3000, User: "erin",
			IdentityFiles: []string{id("id_erin"), id("id_198.18.30.11"), "/etc/ssh/id_all"},
			Jumps:         []jumpHost{{Host: "jump"}}}},
		{"-p wins over the config's Port", "node1", hostDefaults{FlagPort: 4000, DefUser: "me", DefPort: 22122}, hostConfig{
			Alias: "node1", HostName: "198.18.30.11", Port: 4000, User: "bob",
			IdentityFiles: []string{id("id_bob"), id("id_198.18.30.11"), "/etc/ssh/id_all"},
			Jumps:         []jumpHost{{Host: "jump"}}}},
		{"second alias on a Host line; ProxyJump none", "bastion", hostDefaults{DefUser: "me", DefPort: 22}, hostConfig{
			Alias: "bastion", HostName: "198.18.30.1", Port: 2222, User: "alice",
			IdentityFiles: []string{id("id_jump"), "/etc/ssh/id_all"}}},
		{"%n in HostName; a chain with ssh:// and a port", "twohop", agent, hostConfig{
			Alias: "twohop", HostName: "10.0.0.twohop", Port: 2222, User: "everyone",
			IdentityFiles: []string{"/etc/ssh/id_all"},
			Jumps:         []jumpHost{{Host: "jump"}, {User: "dave", Host: "inner", Port: 2022}}}},
		{"host key options", "strict", agent, hostConfig{
			Alias: "strict", HostName: "strict", Port: 2222, User: "everyone",
			IdentityFiles: []string{"/etc/ssh/id_all"}, IdentitiesOnly: true, ConnectTimeout: 7 * time.Second,
			StrictHostKeyChecking: "accept-new", UserKnownHostsFile: filepath.Join(home, "kh"), ServerAliveCountMax: 6}},
	}
	for i := range cases {
		cases[i].want.ServerAliveInterval = 30 * time.Second // Host * gives it to every host
	}
	checkResolve(t, c, cases)
}

// resolveCase is a host's name and defaults, and its resolution.
type resolveCase struct {
	name, alias string
	d           hostDefaults
	want        hostConfig
}

// checkResolve resolves each case's host in c and compares.
func checkResolve(t *testing.T, c *sshConfig, cases []resolveCase) {
	t.Helper()
	for _, tc := range cases {
		got, err := c.resolve(tc.alias, tc.d)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

// TestLoadSSHConfigFlag: -F FILE reads FILE alone (not the system file),
// -F none reads nothing, and a missing -F file or one that does not
// parse is an error naming it.
func TestLoadSSHConfigFlag(t *testing.T) {
	home := writeSSHConfig(t, "Host a\n HostName 1.2.3.4\n", "Host *\n User sys\n")
	other := filepath.Join(t.TempDir(), "cfg")
	if err := os.WriteFile(other, []byte("Host a\n HostName 5.6.7.8\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := hostDefaults{DefUser: "me", DefPort: 22122}
	for _, tc := range []struct{ flag, host, user string }{
		{"", "1.2.3.4", "sys"},
		{other, "5.6.7.8", "me"},
		{NoSSHConfig, "a", "me"},
	} {
		c, err := loadSSHConfig(tc.flag, home, "me")
		if err != nil {
			t.Fatalf("-F %q: %v", tc.flag, err)
		}
		h, err := c.resolve("a", d)
		if err != nil || h.HostName != tc.host || h.User != tc.user {
			t.Errorf("-F %q: %+v %v, want HostName %s User %s", tc.flag, h, err, tc.host, tc.user)
		}
	}
	if _, err := loadSSHConfig("/gw/no/such/config", home, "me"); err == nil || !strings.Contains(err.Error(), "/gw/no/such/config") {
		t.Errorf("missing -F file: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(bad, []byte("Host a\n Include [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadSSHConfig(bad, home, "me"); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "-F none") {
		t.Errorf("unparsable file: %v", err)
	}
	// Include: relative to ~/.ssh, as ssh reads it.
	if err := os.WriteFile(filepath.Join(home, ".ssh", "inc.conf"), []byte("Host b\n HostName 9.9.9.9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	inc := filepath.Join(t.TempDir(), "withinclude")
	if err := os.WriteFile(inc, []byte("Include inc.conf\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := loadSSHConfig(inc, home, "me")
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := c.resolve("b", d); h.HostName != "9.9.9.9" {
		t.Errorf("Include inc.conf: HostName %q, want 9.9.9.9", h.HostName)
	}
}

func TestResolveBadValues(t *testing.T) {
	for _, cfg := range []string{
		"Host a\n Port 0\n", "Host a\n Port ssh\n", "Host a\n ConnectTimeout soon\n",
		"Host a\n ServerAliveInterval 5s\n", "Host a\n ServerAliveInterval -1\n", "Host a\n ServerAliveCountMax 0\n",
		"Host a\n ProxyJump j:99999\n", "Host a\n ProxyJump @j\n", "Host a\n ProxyJump j,,k\n",
	} {
		home := writeSSHConfig(t, cfg, "")
		c, err := loadSSHConfig("", home, "me")
		if err != nil {
			t.Fatalf("%q: %v", cfg, err)
		}
		if _, err := c.resolve("a", hostDefaults{DefPort: 22}); err == nil || !strings.Contains(err.Error(), "ssh config:") {
			t.Errorf("%q: %v, want an ssh config error", cfg, err)
		}
	}
}

func TestParseProxyJump(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []jumpHost
		ok   bool
	}{
		{"jump", []jumpHost{{Host: "jump"}}, true},
		{"none", nil, true},
		{"NONE", nil, true},
		{"alice@jump:2222", []jumpHost{{User: "alice", Host: "jump", Port: 2222}}, true},
		{"ssh://alice@jump:2222", []jumpHost{{User: "alice", Host: "jump", Port: 2222}}, true},
		{"a, b@c ,d:1", []jumpHost{{Host: "a"}, {User: "b", Host: "c"}, {Host: "d", Port: 1}}, true},
		{"[2001:db8::1]:22", []jumpHost{{Host: "2001:db8::1", Port: 22}}, true},
		{"u@[2001:db8::1]", []jumpHost{{User: "u", Host: "2001:db8::1"}}, true},
		{"a@b@c", []jumpHost{{User: "a@b", Host: "c"}}, true},
		{"", nil, false},
		{"j:", nil, false},
		{"j:0", nil, false},
		{"@j", nil, false},
		{"a,,b", nil, false},
		{"[::1", nil, false},
		{strings.Repeat("j,", maxJumps) + "j", nil, false},
	} {
		got, err := parseProxyJump(tc.in)
		if (err == nil) != tc.ok || tc.ok && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseProxyJump(%q) = %+v, %v; want %+v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestExpandTokens(t *testing.T) {
	tok := map[byte]string{'h': "host", 'u': "me"}
	for in, want := range map[string]string{
		"%h":       "host",
		"a%%h":     "a%h",
		"%u-%h-%x": "me-host-%x",
		"100%":     "100%",
		"plain":    "plain",
	} {
		if got := expandTokens(in, tok); got != want {
			t.Errorf("expandTokens(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzSSHConfig: any configuration text loads or fails with an error,
// never panics, and whatever resolves has a port in range and a host.
func FuzzSSHConfig(f *testing.F) {
	for _, s := range []string{userConfig, systemConfig, "Host *\n Port=1\n", "Match all\nPort 3\n", "Host\nPort\n=", "Include nothing\n",
		"Host a\n ProxyJump ssh://u@[::1]:2,b\n", "Host a\n HostName %h.%%.%n\n",
		"Host a\n HostName b\nMatch host b user *,!root\n Port 7\n", "Match !originalhost a localuser x\n User y\n", "Match final\n Port 9\n"} {
		f.Add(s, "a")
	}
	f.Fuzz(func(t *testing.T, cfg, alias string) {
		if strings.Contains(cfg, "Include") || strings.Contains(strings.ToLower(cfg), "exec") {
			return // reads files, or runs commands (Match exec)
		}
		path := filepath.Join(t.TempDir(), "cfg")
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := loadSSHConfig(path, "/home/x", "x")
		if err != nil {
			return
		}
		h, err := c.resolve(alias, hostDefaults{DefPort: 22, DefUser: "x"})
		if err != nil {
			return
		}
		if h.Port < 1 || h.Port > 65535 {
			t.Fatalf("port %d", h.Port)
		}
		for _, j := range h.Jumps {
			if j.Host == "" || j.Port < 0 || j.Port > 65535 {
				t.Fatalf("jump %+v", j)
			}
		}
	})
}

func FuzzParseProxyJump(f *testing.F) {
	for _, s := range []string{"jump", "a@b:1,c", "ssh://[::1]:22", "none", "j:", "@"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		js, err := parseProxyJump(s)
		if err != nil {
			return
		}
		for _, j := range js {
			if j.Host == "" || j.Port < 0 || j.Port > 65535 {
				t.Fatalf("%q: jump %+v", s, j)
			}
		}
	})
}
