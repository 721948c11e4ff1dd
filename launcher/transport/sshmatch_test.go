package transport

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseMatch(t *testing.T) {
	for _, tt := range []struct {
		val  string
		want matchLine
		err  string
	}{
		{"all", matchLine{{Kind: "all"}}, ""},
		{"host gpu-*,!gpu-00 user alice", matchLine{{Kind: "host", Arg: "gpu-*,!gpu-00"}, {Kind: "user", Arg: "alice"}}, ""},
		{"!Host login*", matchLine{{Not: true, Kind: "host", Arg: "login*"}}, ""},
		{`originalhost dgx* exec "test -f %d/.vpn && nc -z %h 22"`, matchLine{{Kind: "originalhost", Arg: "dgx*"}, {Kind: "exec", Arg: "test -f %d/.vpn && nc -z %h 22"}}, ""},
		{"localuser root", matchLine{{Kind: "localuser", Arg: "root"}}, ""},
		{"", nil, "no criteria"},
		{"host", nil, "host needs an argument"},
		{"all host a", nil, `"all" must stand alone`},
		{"!all", nil, `"!all" matches nothing`},
		{"canonical host a", nil, "not read by the launcher"},
		{"final", nil, "not read by the launcher"},
		{"localnetwork 10.0.0.0/8", nil, "not read by the launcher"},
		{"tagged x", nil, "not read by the launcher"},
		{"sometime soon", nil, `unknown criterion "sometime"`},
		{`exec "unterminated`, nil, "unterminated double quote"},
		{`exec 'test -f ~/.vpn'`, matchLine{{Kind: "exec", Arg: "test -f ~/.vpn"}}, ""},
	} {
		got, err := parseMatch(tt.val)
		switch {
		case tt.err != "":
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("parseMatch(%q): %v, want an error with %q", tt.val, err, tt.err)
			}
		case err != nil:
			t.Errorf("parseMatch(%q): %v", tt.val, err)
		case !reflect.DeepEqual(got, tt.want):
			t.Errorf("parseMatch(%q) = %+v, want %+v", tt.val, got, tt.want)
		}
	}
}

func TestMatchPatternList(t *testing.T) {
	for _, tt := range []struct {
		s, list string
		fold    bool
		want    bool
	}{
		{"gpu-17", "gpu-*", true, true},
		{"gpu-00", "gpu-*,!gpu-00", true, false},
		{"GPU-17", "gpu-??", true, true},
		{"gpu-171", "gpu-??", true, false},
		{"alice", "Alice", false, false},
		{"alice", "bob, alice", false, true},
		{"x", "!y", false, false}, // a negation alone matches nothing
		{"a.b.c", "*.*.*", true, true},
		{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaab", "*a*a*a*a*a*a*a*a*a*a*c", true, false},
		{"", "*", true, true},
	} {
		if got := matchPatternList(tt.s, tt.list, tt.fold); got != tt.want {
			t.Errorf("matchPatternList(%q, %q) = %v, want %v", tt.s, tt.list, got, tt.want)
		}
	}
}

// matchConfig is a cluster user's ~/.ssh/config with Match blocks, as
// such files are written: a user and key for the cluster's nodes by the
// name typed and by the address behind it, a site-wide rule by local
// user, a VPN check by exec, and defaults last.
const matchConfig = `Host dgx-*
    HostName %h.cluster.example

Match host *.cluster.example user *,!admin
    User trainer
    IdentityFile ~/.ssh/id_cluster

Match originalhost login? !host 198.18.*
    ProxyJump bastion
    Port 2222

Match localuser %s exec "test -e %s"
    ServerAliveInterval 7

Match exec "exit 3"
    ConnectTimeout 99

Match final
    User never

Host *
    User default
`

func TestResolveSSHMatch(t *testing.T) {
	me := currentUser(t)
	flag := filepath.Join(t.TempDir(), "vpn-up")
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	home := writeSSHConfig(t, sprintfConfig(matchConfig, me, flag), "")
	c, err := loadSSHConfig("", home, me)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], `config:18: Match final: "final" (ssh's pass after CanonicalizeHostname): not read by the launcher; its block is ignored`) {
		t.Errorf("warnings %q, want one for Match final", c.Warnings)
	}
	d := hostDefaults{DefUser: me, DefPort: 22122}
	checkResolve(t, c, []resolveCase{
		{"Match host on the HostName a Host block gave; user not admin", "dgx-07", d, hostConfig{
			Alias: "dgx-07", HostName: "dgx-07.cluster.example", Port: 22122, User: "trainer",
			IdentityFiles: []string{filepath.Join(home, ".ssh", "id_cluster")}, ServerAliveInterval: 7 * time.Second}},
		{"the host list's user comes first and makes !admin fail", "dgx-07", hostDefaults{User: "admin", DefUser: me, DefPort: 22122}, hostConfig{
			Alias: "dgx-07", HostName: "dgx-07.cluster.example", Port: 22122, User: "admin", ServerAliveInterval: 7 * time.Second}},
		{"originalhost and a negated host", "login1", d, hostConfig{
			Alias: "login1", HostName: "login1", Port: 2222, User: "default", Jumps: []jumpHost{{Host: "bastion"}}, ServerAliveInterval: 7 * time.Second}},
		{"exec that fails, and no Host block", "other", d, hostConfig{
			Alias: "other", HostName: "other", Port: 22122, User: "default", ServerAliveInterval: 7 * time.Second}},
	})
	// The exec line that names no host ran once for every host.
	if n := len(c.execs.done); n != 2 {
		t.Errorf("%d distinct exec commands run, want 2: %v", n, c.execs.done)
	}
}

// sprintfConfig fills matchConfig's two %s (the local user, a file that
// exists) and leaves its ssh tokens (%h) as they are.
func sprintfConfig(cfg, me, flag string) string {
	cfg = strings.Replace(cfg, "localuser %s", "localuser "+me, 1)
	return strings.Replace(cfg, `test -e %s`, "test -e "+flag, 1)
}

func currentUser(t *testing.T) string {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}

// TestSSHMatchAsOpenSSH: the launcher's resolution of Host and Match
// blocks agrees with OpenSSH's own (ssh -G, which prints what ssh would
// use) on the host name, user and port, for a configuration with both in
// the orders users write them: Match host decided on the HostName
// obtained before it, a user given with the host, names typed in upper
// case (Host lines match them as typed, Match host without case), and
// "?" as exactly one character (the library's also matches none).
func TestSSHMatchAsOpenSSH(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("ssh not installed (Debian: openssh-client)")
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	flag := filepath.Join(t.TempDir(), "vpn-up")
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := sprintfConfig(matchConfig, u.Username, flag)
	cfg = strings.Replace(cfg, "Match final\n    User never\n\n", "", 1) // ssh reads it; the launcher does not
	cfg += `
Host node?? !node00
    HostName 198.18.30.%h
Match host 198.18.30.node1? user default
    Port 2022
`
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := loadSSHConfig(path, u.HomeDir, u.Username)
	if err != nil {
		t.Fatal(err)
	}
	for _, alias := range []string{"dgx-07", "DGX-08", "login1", "LOGIN1", "login12", "other", "node10", "node1", "node00", "admin@dgx-07", "x@login2", "NODE10"} {
		var d hostDefaults
		name := alias
		if at := strings.LastIndexByte(alias, '@'); at >= 0 {
			d.User, name = alias[:at], alias[at+1:]
		}
		d.DefUser, d.DefPort = u.Username, 22
		got, err := c.resolve(name, d)
		if err != nil {
			t.Errorf("%s: %v", alias, err)
			continue
		}
		out, err := exec.Command("ssh", "-G", "-F", path, alias).Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("ssh -G %s: %v: %s", alias, err, ee.Stderr)
		}
		if err != nil {
			t.Fatal(err)
		}
		ssh := map[string]string{}
		for _, l := range strings.Split(string(out), "\n") {
			if k, v, ok := strings.Cut(l, " "); ok {
				if _, seen := ssh[k]; !seen {
					ssh[k] = v
				}
			}
		}
		if want := strings.ToLower(got.HostName); ssh["hostname"] != want { // ssh lower-cases the name it dials
			t.Errorf("%s: hostname %q, ssh -G %q", alias, want, ssh["hostname"])
		}
		if ssh["user"] != got.User {
			t.Errorf("%s: user %q, ssh -G %q", alias, got.User, ssh["user"])
		}
		if ssh["port"] != strconv.Itoa(got.Port) {
			t.Errorf("%s: port %d, ssh -G %q", alias, got.Port, ssh["port"])
		}
	}
}

// FuzzParseMatch: any Match line parses or fails with an error, never
// panics; what parses is criteria the launcher decides, each with an
// argument where it needs one, "all" alone.
func FuzzParseMatch(f *testing.F) {
	for _, s := range []string{"all", "host a,b !user c", `exec "x y" host z`, "!localuser r", "final", "all all", `exec "`, "host"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseMatch(s)
		if err != nil {
			return
		}
		if len(m) == 0 {
			t.Fatalf("%q: no criteria and no error", s)
		}
		for _, c := range m {
			switch c.Kind {
			case "all":
				if len(m) != 1 || c.Not {
					t.Fatalf("%q: %+v", s, m)
				}
			case "host", "originalhost", "user", "localuser", "exec":
				if c.Arg == "" {
					t.Fatalf("%q: %s without an argument", s, c.Kind)
				}
			default:
				t.Fatalf("%q: kind %q", s, c.Kind)
			}
		}
	})
}

// TestMatchExecBounded: commands of many hosts resolved at once run at
// most maxMatchExecs at a time, each once, and each answers for its own
// host.
func TestMatchExecBounded(t *testing.T) {
	dir := t.TempDir()
	// Each command notes itself running, counts who else is, and holds a
	// while; hosts whose name ends in 0 do not match.
	cmd := `touch ` + dir + `/run.%h; n=$(ls ` + dir + ` | grep -c '^run\.'); echo $n > ` + dir + `/seen.%h; sleep 0.2; rm ` + dir + `/run.%h; case %h in *0) exit 1;; esac`
	home := writeSSHConfig(t, "Match exec \""+cmd+"\"\n    Port 2022\n", "")
	c, err := loadSSHConfig("", home, "me")
	if err != nil {
		t.Fatal(err)
	}
	const hosts = 40
	ports := make([]int, hosts)
	var wg sync.WaitGroup
	for i := range hosts {
		wg.Go(func() {
			for range 2 { // the second lookup of a host runs nothing
				h, err := c.resolve(fmt.Sprintf("h%d", i), hostDefaults{DefPort: 22122, DefUser: "me"})
				if err != nil {
					t.Error(err)
				}
				ports[i] = h.Port
			}
		})
	}
	wg.Wait()
	for i, p := range ports {
		want := 2022
		if i%10 == 0 {
			want = 22122
		}
		if p != want {
			t.Errorf("h%d: port %d, want %d", i, p, want)
		}
	}
	most := 0
	seen, _ := filepath.Glob(filepath.Join(dir, "seen.*"))
	for _, f := range seen {
		b, _ := os.ReadFile(f)
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		most = max(most, n)
	}
	if len(seen) != hosts || most > maxMatchExecs || most < 2 {
		t.Errorf("%d commands ran, at most %d at once; want %d, 2 to %d at once", len(seen), most, hosts, maxMatchExecs)
	}
}
