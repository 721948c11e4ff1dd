package transport

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// userSSHConfig is a real user's shape of ~/.ssh/config: a few dozen
// Host blocks for other machines (git forges, bastions, lab boxes), the
// cluster's nodes by pattern, and defaults for every host last.
func userSSHConfig(blocks int) string {
	var b strings.Builder
	b.WriteString("Host github.com gitlab.com\n    User git\n    IdentityFile ~/.ssh/id_git\n\n")
	for i := range blocks {
		fmt.Fprintf(&b, "Host box%d box%d.lab.example.com\n    HostName 10.9.%d.%d\n    User alice\n    Port 22%02d\n\n", i, i, i/250, i%250+1, i%100)
	}
	b.WriteString("Host bastion\n    HostName bastion.example.com\n    User alice\n\n")
	b.WriteString("Host gpu-* node?? !node00\n    User alice\n    ProxyJump bastion\n    IdentityFile ~/.ssh/id_cluster\n    ServerAliveInterval 30\n\n")
	b.WriteString("Host *\n    ServerAliveInterval 60\n    ServerAliveCountMax 3\n    IdentitiesOnly yes\n    AddKeysToAgent yes\n    ForwardAgent no\n")
	return b.String()
}

// BenchmarkResolveSSHConfig is a host's resolution against a user's
// configuration of a few and of some dozens of blocks, as the launcher
// does once per host of a launch.
func BenchmarkResolveSSHConfig(b *testing.B) {
	for _, blocks := range []int{0, 40} {
		b.Run(strconv.Itoa(blocks+4)+" blocks", func(b *testing.B) { // and the four every such file has
			home := b.TempDir()
			if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(home, ".ssh", "config"), []byte(userSSHConfig(blocks)), 0o600); err != nil {
				b.Fatal(err)
			}
			c, err := loadSSHConfig(filepath.Join(home, ".ssh", "config"), home, "alice")
			if err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				i++
				if _, err := c.resolve("gpu-"+strconv.Itoa(i%10000), hostDefaults{DefPort: 22122, DefUser: "alice"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestHostBlocksAsLibrary: reading keywords from the blocks matched once
// gives what the library's Get and GetAll give, file by file, the user's
// first: for patterns, negations, keywords in any case, an empty value
// (which ends the search in its file), repeated keywords and an Include.
func TestHostBlocksAsLibrary(t *testing.T) {
	home := t.TempDir()
	ssh := filepath.Join(home, ".ssh")
	if err := os.MkdirAll(ssh, 0o700); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"config": userSSHConfig(5) + "\nHost inc-*\n    Include extra\n    User fromblock\n" +
			"\nHost empty\n    User \"\"\n    Port 2201\n" +
			"\nHost emptyval\n    User=\n" +
			"\nHost empty*\n    User later\n" +
			"\nHost node07\n    IDENTITYFILE ~/.ssh/a\n    identityfile ~/.ssh/b\n    hostname 10.1.1.7\n",
		"extra":  "Host inc-*\n    User frominclude\n    Port 2222\n",
		"system": "Host *\n    User sysuser\n    Port 2022\n    IdentityFile ~/.ssh/sys\n    StrictHostKeyChecking accept-new\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(ssh, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := SystemSSHConfig
	SystemSSHConfig = filepath.Join(ssh, "system")
	t.Cleanup(func() { SystemSSHConfig = old })
	c, err := loadSSHConfig("", home, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.files) != 2 {
		t.Fatalf("%d files read, want the user's and the system's", len(c.files))
	}
	libGet := func(alias, key string) string {
		for _, f := range c.files {
			if v, err := f.Get(alias, key); err == nil && v != "" {
				return v
			}
		}
		return ""
	}
	libGetAll := func(alias, key string) []string {
		var all []string
		for _, f := range c.files {
			v, _ := f.GetAll(alias, key)
			all = append(all, v...)
		}
		return all
	}
	// Not "node1" against "node??": the library's ? also matches no
	// character, ssh's exactly one (TestSSHMatchAsOpenSSH holds that).
	aliases := []string{"gpu-1", "node07", "node00", "box3", "box3.lab.example.com", "github.com", "bastion", "inc-a", "empty", "emptyval", "other"}
	keys := []string{"HostName", "Port", "User", "IdentityFile", "IdentitiesOnly", "ConnectTimeout", "ServerAliveInterval", "ServerAliveCountMax", "StrictHostKeyChecking", "UserKnownHostsFile", "ProxyJump", "ForwardAgent"}
	for _, alias := range aliases {
		bl := c.blocks(alias, hostDefaults{})
		for _, key := range keys {
			if got, want := bl.get(alias, key), libGet(alias, key); got != want {
				t.Errorf("%s %s: %q, the library %q", alias, key, got, want)
			}
			if got, want := bl.getAll(alias, key), libGetAll(alias, key); !slices.Equal(got, want) {
				t.Errorf("%s %s (all): %q, the library %q", alias, key, got, want)
			}
		}
	}
	// What the cases above rest on.
	for _, tc := range []struct{ alias, key, want string }{
		{"inc-a", "User", "frominclude"}, {"inc-a", "Port", "2222"}, {"emptyval", "User", "sysuser"},
		{"node00", "ProxyJump", ""}, {"node07", "HostName", "10.1.1.7"}, {"gpu-1", "ServerAliveInterval", "30"},
	} {
		if got := c.blocks(tc.alias, hostDefaults{}).get(tc.alias, tc.key); got != tc.want {
			t.Errorf("%s %s = %q, want %q", tc.alias, tc.key, got, tc.want)
		}
	}
}
