package sshd_test

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/account"
	"github.com/gangway-hpc/gangway/agent/agenttest"
	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/agent/sshd"
)

// observed returns a server adjustment (for withServer) that replaces
// the SSH server's log with an observer (debug and up), and the
// recorded entries.
func observed() (func(*sshd.Server), *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return func(s *sshd.Server) { s.Log = zap.New(core) }, logs
}

// withServer combines server adjustments into one option (agenttest
// keeps only the last WithServer).
func withServer(fs ...func(s *sshd.Server)) agenttest.Option {
	return agenttest.WithServer(func(_ int, s *sshd.Server) {
		for _, f := range fs {
			f(s)
		}
	})
}

// as returns ssh options logging in with keys as name.
func as(keys sshtest.Keys, port int, name string) []string {
	return append(sshtest.SSHArgs(keys, port), "-l", name)
}

// hasEntry reports whether logs hold an entry with message msg whose
// string fields include every pair of want.
func hasEntry(logs *observer.ObservedLogs, msg string, want map[string]string) bool {
	for _, e := range logs.FilterMessage(msg).All() {
		m := e.ContextMap()
		ok := true
		for k, v := range want {
			if s, _ := m[k].(string); !strings.Contains(s, v) {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// TestSessionsRunAsUser: a root agent runs a stock session as the user
// the client names, with that user's ids, groups, home, identity
// variables and a pty of its own; the user's own authorized_keys lets it
// in, the agent's --authorized-keys (root's) does not, and the user's key
// does not make anyone root.
func TestSessionsRunAsUser(t *testing.T) {
	agenttest.RequireRoot(t)
	t.Parallel()
	c := agenttest.StartLocal(t, 1)
	h := c.Hosts[0]
	u := agenttest.NewUser(t, "", "-G", "users")
	keys := u.NewKeys(t)
	users, err := user.LookupGroup("users")
	if err != nil {
		t.Fatal(err)
	}

	stdout, stderr, code := sshRun(t, h, as(keys, h.Port, u.Name), "", nil, `id -u; id -g; id -G; pwd; echo "$HOME|$USER|$LOGNAME|$SHELL"`)
	want := fmt.Sprintf("%d\n%d\n%d %s\n%s\n%s|%s|%s|/bin/bash\n", u.Uid, u.Gid, u.Gid, users.Gid, u.Home, u.Home, u.Name, u.Name)
	if code != 0 || stdout != want {
		t.Errorf("as %s: exit %d, stdout %q, stderr %q; want %q", u.Name, code, stdout, stderr, want)
	}

	stdout, stderr, code = sshRun(t, h, append(as(keys, h.Port, u.Name), "-tt"), "", nil, `stat -c %U:%G:%a "$(tty)"`)
	if code != 0 || stdout != u.Name+":tty:620\r\n" {
		t.Errorf("pty: exit %d, stdout %q, stderr %q; want the pty owned by %s:tty, mode 620", code, stdout, stderr, u.Name)
	}

	// root's keys (the agent's --authorized-keys) are not the user's.
	if stdout, stderr, code := sshRun(t, h, as(c.Keys, h.Port, u.Name), "", nil, "id -u"); code != 255 || stdout != "" {
		t.Errorf("the agent's --authorized-keys key logged in as %s: exit %d, %q %q", u.Name, code, stdout, stderr)
	}
	// The user's key is not root's.
	if stdout, stderr, code := sshRun(t, h, as(keys, h.Port, "root"), "", nil, "id -u"); code != 255 || stdout != "" {
		t.Errorf("%s's key logged in as root: exit %d, %q %q", u.Name, code, stdout, stderr)
	}
	// root still logs in with the agent's --authorized-keys.
	if stdout, _, code := sshRun(t, h, as(c.Keys, h.Port, "root"), "", nil, "id -u"); code != 0 || stdout != "0\n" {
		t.Errorf("root with --authorized-keys: exit %d, %q", code, stdout)
	}
}

// TestRefusedUsers: unknown users, users whose shell refuses logins,
// root under --permit-root-login no and users outside --allow-users are
// refused, whatever key they hold; the log says why.
func TestRefusedUsers(t *testing.T) {
	agenttest.RequireRoot(t)
	t.Parallel()
	obs, logs := observed()
	u := agenttest.NewUser(t, "")
	nologin := agenttest.NewUser(t, "/usr/sbin/nologin")
	keys := u.NewKeys(t)
	nologin.Authorize(t, keys.ClientSigner.PublicKey())

	c := agenttest.StartLocal(t, 1, withServer(obs))
	h := c.Hosts[0]
	for _, tc := range []struct {
		name, user, why string
		keys            sshtest.Keys
	}{
		{"unknown user", "nosuchuser", "unknown user", c.Keys},
		{"nobody", "nobody", "refuses logins", c.Keys},
		{"nologin shell", nologin.Name, "refuses logins", keys},
	} {
		stdout, stderr, code := sshRun(t, h, as(tc.keys, h.Port, tc.user), "", nil, "echo should-not-run")
		if code != 255 || stdout != "" || !strings.Contains(stderr, "Permission denied") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want Permission denied", tc.name, code, stdout, stderr)
		}
		if !hasEntry(logs, "refused login", map[string]string{"user": tc.user, "reason": tc.why}) {
			t.Errorf("%s: no refusal logged with reason %q", tc.name, tc.why)
		}
	}

	t.Run("permit-root-login no and allow-users", func(t *testing.T) {
		c := agenttest.StartLocal(t, 1, withServer(func(s *sshd.Server) {
			s.PermitRootLogin = sshd.PermitRootNo
			s.AllowUsers = []string{"gwtestuser*"}
		}))
		h := c.Hosts[0]
		if _, stderr, code := sshRun(t, h, as(c.Keys, h.Port, "root"), "", nil, "true"); code != 255 {
			t.Errorf("root logged in under --permit-root-login no: exit %d, %q", code, stderr)
		}
		if stdout, stderr, code := sshRun(t, h, as(keys, h.Port, u.Name), "", nil, "id -un"); code != 0 || stdout != u.Name+"\n" {
			t.Errorf("%s (in --allow-users gwtestuser*): exit %d, %q %q", u.Name, code, stdout, stderr)
		}
	})
	t.Run("allow-users", func(t *testing.T) {
		c := agenttest.StartLocal(t, 1, withServer(func(s *sshd.Server) { s.AllowUsers = []string{"root"} }))
		h := c.Hosts[0]
		if _, stderr, code := sshRun(t, h, as(keys, h.Port, u.Name), "", nil, "true"); code != 255 {
			t.Errorf("%s outside --allow-users root logged in: exit %d, %q", u.Name, code, stderr)
		}
		if stdout, _, code := sshRun(t, h, as(c.Keys, h.Port, "root"), "", nil, "id -u"); code != 0 || stdout != "0\n" {
			t.Errorf("root (in --allow-users, permit-root-login by default): exit %d, %q", code, stdout)
		}
	})
}

// TestNonRootAgentServesItsUserOnly: an agent that does not run as root
// (SetSelf) accepts only its own user name, and tells a client that
// names another user why.
func TestNonRootAgentServesItsUserOnly(t *testing.T) {
	agenttest.RequireRoot(t)
	t.Parallel()
	u := agenttest.NewUser(t, "")
	keys := u.NewKeys(t)
	self := &account.Account{Name: u.Name, Uid: u.Uid, Gid: u.Gid, Groups: []uint32{u.Gid}, Home: u.Home, Shell: "/bin/bash"}
	obs, logs := observed()
	c := agenttest.StartLocal(t, 1, withServer(obs, func(s *sshd.Server) { s.SetSelf(self) }))
	h := c.Hosts[0]
	args := append([]string{"-o", "LogLevel=INFO"}, as(keys, h.Port, "root")...) // the first value wins: INFO shows banners
	stdout, stderr, code := sshRun(t, h, args, "", nil, "echo should-not-run")
	want := "this agent runs as user " + u.Name + ", not as root, so it can run sessions only as " + u.Name
	if code != 255 || stdout != "" || !strings.Contains(stderr, want) {
		t.Errorf("root at an agent of %s: exit %d, stdout %q, stderr %q; want the banner %q", u.Name, code, stdout, stderr, want)
	}
	if !hasEntry(logs, "refused login", map[string]string{"user": "root", "reason": "the agent runs as " + u.Name}) {
		t.Error("refusal not logged")
	}
	if stdout, stderr, code := sshRun(t, h, as(keys, h.Port, u.Name), "", nil, "id -un"); code != 0 || stdout != u.Name+"\n" {
		t.Errorf("%s at its own agent: exit %d, %q %q", u.Name, code, stdout, stderr)
	}
}

// TestStrictModes: an authorized_keys file, or a directory above it up
// to the home, that others could have written, or one owned by another
// user, is ignored with a warning naming it; put right, it works again.
// The agent's --authorized-keys file is held to the same rules.
func TestStrictModes(t *testing.T) {
	agenttest.RequireRoot(t)
	t.Parallel()
	u := agenttest.NewUser(t, "")
	keys := u.NewKeys(t)
	ak := filepath.Join(u.Home, ".ssh", "authorized_keys")
	obs, logs := observed()
	c := agenttest.StartLocal(t, 1, withServer(obs))
	h := c.Hosts[0]
	login := func(t *testing.T, k sshtest.Keys, name string) bool {
		t.Helper()
		stdout, _, code := sshRun(t, h, as(k, h.Port, name), "", nil, "echo in")
		return code == 0 && stdout == "in\n"
	}
	if !login(t, keys, u.Name) {
		t.Fatal("the user cannot log in with sound modes")
	}
	chmod := func(p string, m os.FileMode) func() {
		return func() {
			if err := os.Chmod(p, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	chown := func(p string, uid uint32) func() {
		return func() {
			if err := os.Chown(p, int(uid), -1); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name        string
		spoil, mend func()
		path        string // the path the warning names
		keys        sshtest.Keys
		user        string
	}{
		{"group-writable file", chmod(ak, 0o620), chmod(ak, 0o600), ak, keys, u.Name},
		{"world-writable .ssh", chmod(filepath.Dir(ak), 0o777), chmod(filepath.Dir(ak), 0o700), filepath.Dir(ak), keys, u.Name},
		{"group-writable home", chmod(u.Home, 0o775), chmod(u.Home, 0o755), u.Home, keys, u.Name},
		{"file owned by another user", chown(ak, 65534), chown(ak, u.Uid), ak, keys, u.Name},
		{"group-writable --authorized-keys", chmod(c.Keys.AuthorizedKeys, 0o660), chmod(c.Keys.AuthorizedKeys, 0o600), c.Keys.AuthorizedKeys, c.Keys, "root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spoil()
			if login(t, tc.keys, tc.user) {
				t.Errorf("logged in as %s through %s", tc.user, tc.name)
			}
			if !hasEntry(logs, "ignoring an authorized_keys file others could have written (StrictModes)", map[string]string{"error": tc.path + ":"}) {
				t.Errorf("no StrictModes warning naming %s", tc.path)
			}
			tc.mend()
			if !login(t, tc.keys, tc.user) {
				t.Errorf("%s cannot log in once %s is mended", tc.user, tc.path)
			}
		})
	}
}

// TestHostKeyModes: a host key that group or others may read is refused.
func TestHostKeyModes(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "host_key")
	if _, err := sshd.LoadHostKey(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	_, err := sshd.LoadHostKey(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "0640") || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("LoadHostKey of a 0640 key: %v; want a refusal naming the file, its mode and the fix", err)
	}
	t.Logf("refused: %v", err)
}

// TestAcceptEnvPatterns: --accept-env adds patterns to LANG and LC_*.
func TestAcceptEnvPatterns(t *testing.T) {
	t.Parallel()
	c := agenttest.StartLocal(t, 1, withServer(func(s *sshd.Server) {
		s.AcceptEnv = append(append([]string{}, sshd.DefaultAcceptEnv...), "GW_*", "OMP_NUM_THREAD?")
	}))
	h := c.Hosts[0]
	env := []string{"LANG=C", "GW_A=1", "OMP_NUM_THREADS=4", "LD_PRELOAD=/x.so", "GWX=2"}
	stdout, stderr, _ := sshRun(t, h, append(sshtest.SSHArgs(c.Keys, h.Port), "-o", "SendEnv=LANG GW* OMP_NUM_THREADS LD_PRELOAD"), "", env,
		`printf '%s|%s|%s|%s|%s' "$LANG" "$GW_A" "$OMP_NUM_THREADS" "$LD_PRELOAD" "$GWX"`)
	if stdout != "C|1|4||" {
		t.Errorf("got %q (stderr %q), want C|1|4||", stdout, stderr)
	}
}

// TestAuditLog: logins, commands, subsystems and logouts are logged at
// Info with who and which key; what clients choose is clipped to 64
// bytes; refusals are rate-limited, so a flood of huge user names stays a
// few short lines.
func TestAuditLog(t *testing.T) {
	t.Parallel()
	obs, logs := observed()
	c := agenttest.StartLocal(t, 1, withServer(obs))
	h := c.Hosts[0]
	cl, err := dialAgent(h, c.Keys.ClientSigner)
	if err != nil {
		t.Fatal(err)
	}
	s, err := cl.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	long := "true " + strings.Repeat("x", 300)
	if err := s.Run(long); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	fp := ssh.FingerprintSHA256(c.Keys.ClientSigner.PublicKey())
	if !hasEntry(logs, "login", map[string]string{"user": "root", "fingerprint": fp, "method": "publickey", "file": c.Keys.AuthorizedKeys, "remote": "127.0."}) {
		t.Errorf("no login line with user, key fingerprint and file: %v", logs.FilterMessage("login").All())
	}
	execs := logs.FilterMessage("exec").All()
	if len(execs) != 1 {
		t.Fatalf("exec lines: %v", execs)
	}
	if cmd, _ := execs[0].ContextMap()["command"].(string); !strings.HasPrefix(cmd, "true xxx") || len(cmd) > 64+20 {
		t.Errorf("exec command logged as %q (%d bytes), want it clipped to 64 bytes", cmd, len(cmd))
	}
	waitFor(t, func() bool { return logs.FilterMessage("logout").Len() == 1 })
	if _, ok := logs.FilterMessage("logout").All()[0].ContextMap()["duration"]; !ok {
		t.Error("logout line without duration")
	}

	// 60 logins with a 100 KB user name: a few short lines in all.
	name := strings.Repeat("n", 100<<10)
	for range 60 {
		cl, err := ssh.Dial("tcp", h.HostPort(), &ssh.ClientConfig{
			User: name, Auth: []ssh.AuthMethod{ssh.PublicKeys(c.Keys.ClientSigner)},
			HostKeyCallback: ssh.FixedHostKey(h.HostPub), Timeout: agenttest.Deadline,
		})
		if err == nil {
			cl.Close()
			t.Fatal("a 100 KB user name logged in")
		}
	}
	refused := logs.FilterMessage("refused login").All()
	bytes := 0
	for _, e := range refused {
		for k, v := range e.ContextMap() {
			bytes += len(k) + len(fmt.Sprint(v))
		}
		if u, _ := e.ContextMap()["user"].(string); len(u) > 64+20 {
			t.Errorf("refusal logs a %d-byte user name", len(u))
		}
	}
	if len(refused) > 20 || bytes > 20<<10 {
		t.Errorf("60 refusals logged %d lines, %d bytes of fields; want at most 20 lines of a few hundred bytes", len(refused), bytes)
	}
	t.Logf("60 refused logins with a 100 KB user name: %d log lines, %d bytes of fields", len(refused), bytes)
}

// TestSubsystemAudited: a gangway subsystem request is logged with its
// user.
func TestSubsystemAudited(t *testing.T) {
	t.Parallel()
	obs, logs := observed()
	c := agenttest.StartLocal(t, 1, withServer(obs))
	cl, err := dialAgent(c.Hosts[0], c.Keys.ClientSigner)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ch, ok := subsystem(t, cl)
	if !ok {
		t.Fatal("subsystem refused")
	}
	ch.Close()
	if !hasEntry(logs, "subsystem", map[string]string{"user": "root", "subsystem": "gangway"}) {
		t.Errorf("no subsystem line: %v", logs.All())
	}
}

// waitFor polls cond until it holds or agenttest.Deadline passes.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(agenttest.Deadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", agenttest.Deadline)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
