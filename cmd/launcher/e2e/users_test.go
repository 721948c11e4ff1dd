package e2e_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gangway-hpc/gangway/agent"
	"github.com/gangway-hpc/gangway/agent/agenttest"
	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/agent/sshd"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

// statusIDs reads the Uid: and Gid: lines of /proc/PID/status (real,
// effective, saved and filesystem ids).
func statusIDs(t *testing.T, pid int) (uid, gid string) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		switch k {
		case "Uid":
			uid = strings.Join(strings.Fields(v), " ")
		case "Gid":
			gid = strings.Join(strings.Fields(v), " ")
		}
	}
	return uid, gid
}

// agentUid is the Uid: line of a supervisor's parent, its agent.
func agentUid(t *testing.T, supervisor int) string {
	uid, _ := statusIDs(t, parentOf(supervisor))
	return uid
}

// environOf reads a process's environment.
func environOf(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// asUser is a -H entry that logs in to h as user, with slots slots.
func asUser(user string, h *agenttest.Host, slots int) string {
	return fmt.Sprintf("%s@%s:%d:%d", user, h.Addr, slots, h.Port)
}

// waitingRank is a rank program that says its pid and waits to be
// stopped. It does not exec after saying so: /proc/PID/environ reads
// empty while a process is between two programs.
var waitingRank = []string{"sh", "-c", "echo ready $$; sleep 60"}

// checkRankRunsAs waits for the launch's one rank, proves through /proc
// that it runs as u (ids, identity variables) in dir, stops the launch
// and returns the rank's pid.
func checkRankRunsAs(t *testing.T, l *e2e.Launch, u *agenttest.User, dir string) int {
	t.Helper()
	out, ok := l.Stdout.WaitFor(e2e.Deadline, e2e.HasReady(1))
	if !ok {
		t.Fatalf("the rank did not start:\nstdout:\n%s\nstderr:\n%s", out, l.Stderr)
	}
	pid := e2e.ReadyPids(out)[0]
	uid, gid := statusIDs(t, pid)
	wantUID, wantGID := strings.Repeat(strconv.Itoa(int(u.Uid))+" ", 4), strings.Repeat(strconv.Itoa(int(u.Gid))+" ", 4)
	if uid != strings.TrimSpace(wantUID) || gid != strings.TrimSpace(wantGID) {
		t.Errorf("rank pid %d: /proc status Uid %q, Gid %q; want %s's %d and %d", pid, uid, gid, u.Name, u.Uid, u.Gid)
	}
	env := environOf(t, pid)
	for k, want := range map[string]string{"USER": u.Name, "LOGNAME": u.Name, "HOME": u.Home, "RANK": "0"} {
		if env[k] != want {
			t.Errorf("rank's %s=%q, want %q", k, env[k], want)
		}
	}
	if cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); cwd != dir {
		t.Errorf("rank's working directory %s, want %s", cwd, dir)
	}
	// The rank's supervisor stays the agent's user (root, when the agent
	// serves other users): the rank can neither signal it nor leave it.
	sup := parentOf(pid)
	if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", sup)); !strings.HasPrefix(string(cmd), "gangway-supervisor\x00") {
		t.Errorf("the rank's parent %d is %q, not its supervisor", sup, cmd)
	} else if uid, _ := statusIDs(t, sup); uid != agentUid(t, sup) {
		t.Errorf("the rank's supervisor runs as Uid %q, not as its agent", uid)
	}
	// Its error file's directory is the user's, and no one else's.
	errDir := filepath.Dir(env["TORCHELASTIC_ERROR_FILE"])
	if fi, err := os.Stat(errDir); err != nil {
		t.Errorf("TORCHELASTIC_ERROR_FILE=%q: %v", env["TORCHELASTIC_ERROR_FILE"], err)
	} else if st := fi.Sys().(*syscall.Stat_t); st.Uid != u.Uid || fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: uid %d mode %v, want %s's (%d) and 0700", errDir, st.Uid, fi.Mode().Perm(), u.Name, u.Uid)
	}
	t.Logf("rank pid %d runs as %s: Uid %s, Gid %s, in %s", pid, u.Name, uid, gid, dir)
	l.Signal(syscall.SIGTERM)
	if code := l.Wait(t); code != 143 {
		t.Errorf("launcher: exit code %d after SIGTERM, want 143\nstderr:\n%s", code, l.Stderr)
	}
	return pid
}

// TestJobRunsAsUser: a job launched as user@host runs its ranks as that
// user (proved by a running rank's /proc/PID/status), in the launcher's
// working directory, with the user's identity; --output-filename files
// are the launcher's own, on its side.
func TestJobRunsAsUser(t *testing.T) {
	e2e.NoTree(t, "one host")
	agenttest.RequireRoot(t)
	t.Parallel()
	u := agenttest.NewUser(t, "")
	keys := u.NewKeys(t)
	c := e2e.StartLocal(t, 1)
	h := c.Hosts[0]
	out := filepath.Join(t.TempDir(), "out")
	cwd, _ := os.Getwd()
	l := c.StartLauncher(t, append([]string{"-l", "-i", keys.ClientKey, "-np", "1", "-H", asUser(u.Name, h, 1),
		"--output-filename", out}, waitingRank...)...)
	pid := checkRankRunsAs(t, l, u, cwd)

	f := filepath.Join(out, "rank.0", "stdout")
	b, err := os.ReadFile(f)
	if err != nil || string(b) != fmt.Sprintf("ready %d\n", pid) {
		t.Errorf("%s: %q %v, want the rank's line", f, b, err)
	}
	for _, p := range []string{out, filepath.Dir(f), f} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != uint32(os.Geteuid()) {
			t.Errorf("%s belongs to uid %d, want the launcher's %d", p, st.Uid, os.Geteuid())
		}
	}
}

// TestUserRankRootCause: a rank of another user writes its
// TORCHELASTIC_ERROR_FILE (torch's @record format) and fails; the report
// shows the exception. A rank that puts a link there to a file it may not
// read gets nothing sent: the agent, root, reads only the user's own file.
func TestUserRankRootCause(t *testing.T) {
	e2e.NoTree(t, "one host")
	agenttest.RequireRoot(t)
	t.Parallel()
	u := agenttest.NewUser(t, "")
	keys := u.NewKeys(t)
	c := e2e.StartLocal(t, 1)
	h := c.Hosts[0]
	secret := filepath.Join(t.TempDir(), "secret.json") // root's, 0600
	if err := os.WriteFile(secret, []byte(`{"message": "SecretError: root's file"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	record := `{"message": {"message": "RuntimeError: loss is nan", "extraInfo": {"py_callstack": "Traceback\n  File \"train.py\", line 3\nRuntimeError: loss is nan\n"}}}`
	for _, tc := range []struct {
		name, script, want, notWant string
	}{
		{"own file", "printf '%s' '" + record + "' > \"$TORCHELASTIC_ERROR_FILE\"; exit 3",
			"rank 1 on " + h.Addr + " raised RuntimeError: loss is nan (from its TORCHELASTIC_ERROR_FILE)", ""},
		{"link to root's file", "ln -s " + secret + " \"$TORCHELASTIC_ERROR_FILE\"; exit 3", "", "SecretError"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := c.RunLauncher(t, "-i", keys.ClientKey, "-np", "2", "-H", asUser(u.Name, h, 2),
				"sh", "-c", `if [ "$RANK" = 1 ]; then `+tc.script+`; fi; sleep 30`)
			if code != 3 || !strings.Contains(stderr, tc.want) || tc.notWant != "" && strings.Contains(stderr, tc.notWant) {
				t.Errorf("exit %d, want 3; stderr should show %q and not %q:\n%s\nstdout:\n%s", code, tc.want, tc.notWant, stderr, stdout)
			}
		})
	}
}

// TestJobWorkdirNotReachable: a working directory the user cannot reach
// refuses the job on every host before any rank starts, naming the user.
func TestJobWorkdirNotReachable(t *testing.T) {
	e2e.NoTree(t, "one host")
	agenttest.RequireRoot(t)
	t.Parallel()
	u := agenttest.NewUser(t, "")
	keys := u.NewKeys(t)
	c := e2e.StartLocal(t, 1)
	h := c.Hosts[0]
	private := t.TempDir() // 0700, root's
	stdout, stderr, code := c.RunLauncher(t, append([]string{"-i", keys.ClientKey, "-np", "1", "-H", asUser(u.Name, h, 1),
		"-wdir", private}, "echo", "should-not-run")...)
	if code != 1 || stdout != "" || !strings.Contains(stderr, "not accessible to user "+u.Name) {
		t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit 1 naming the directory and %s", code, stdout, stderr, u.Name)
	}
}

// TestDropCachesByUser: --drop-caches from a user other than root is
// refused with the reason, unless the agent names the user in
// --drop-caches-users; root may.
func TestDropCachesByUser(t *testing.T) {
	e2e.NoTree(t, "one host")
	agenttest.RequireRoot(t)
	t.Parallel()
	u := agenttest.NewUser(t, "")
	keys := u.NewKeys(t)
	for _, tc := range []struct {
		name    string
		users   []string
		login   string
		keys    sshtest.Keys
		allowed bool
	}{
		{"user", nil, u.Name, keys, false},
		{"named user", []string{u.Name}, u.Name, keys, true},
		{"root", nil, "root", sshtest.Keys{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeSysRoot(t)
			c := e2e.StartLocal(t, 1,
				agenttest.WithAgent(func(_ int, a *agent.Agent) { a.AllowDropCaches, a.Facts.SysRoot = true, root }),
				agenttest.WithServer(func(_ int, s *sshd.Server) { s.DropCachesUsers = tc.users }))
			h := c.Hosts[0]
			args := []string{"-np", "1", "-H", asUser(tc.login, h, 1), "--drop-caches", "true"}
			if tc.keys.ClientKey != "" {
				args = append([]string{"-i", tc.keys.ClientKey}, args...)
			}
			_, stderr, code := c.RunLauncher(t, args...)
			written, _ := os.ReadFile(filepath.Join(root, "proc", "sys", "vm", "drop_caches"))
			if tc.allowed && (code != 0 || string(written) != "3") {
				t.Errorf("exit %d, drop_caches %q, want 0 and 3\nstderr:\n%s", code, written, stderr)
			}
			if !tc.allowed && (code != 1 || len(written) != 0 || !strings.Contains(stderr, "user "+u.Name+" may not drop page caches on this agent")) {
				t.Errorf("exit %d, drop_caches %q; want 1, nothing written and the reason\nstderr:\n%s", code, written, stderr)
			}
		})
	}
}

// fakeSysRoot is a directory the agent's facts and page-cache drop read
// and write instead of /proc and /sys.
func fakeSysRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for p, text := range map[string]string{
		"proc/sys/kernel/hostname":      "fakehost\n",
		"sys/devices/system/cpu/online": "0-1\n",
		"proc/sys/vm/drop_caches":       "",
	} {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestLauncherHostCertificate: agents presenting host certificates are
// trusted through a @cert-authority line alone (no line per host key);
// another CA's line refuses them at once with a message saying what to
// do; plain known_hosts lines still verify the same agents.
func TestLauncherHostCertificate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, other := filepath.Join(dir, "host_ca"), filepath.Join(dir, "other_ca")
	for _, k := range []string{ca, other} {
		agenttest.SSHKeygen(t, "-q", "-t", "ed25519", "-N", "", "-f", k)
	}
	c := e2e.StartLocal(t, 2, agenttest.WithHostCA(ca))
	knownHosts := func(caKey string) string {
		var pats []string
		for _, h := range c.Hosts {
			pats = append(pats, fmt.Sprintf("[%s]:%d", h.Addr, h.Port))
		}
		pub, err := os.ReadFile(caKey + ".pub")
		if err != nil {
			t.Fatal(err)
		}
		kh := filepath.Join(t.TempDir(), "known_hosts")
		if err := os.WriteFile(kh, []byte("@cert-authority "+strings.Join(pats, ",")+" "+string(pub)), 0o600); err != nil {
			t.Fatal(err)
		}
		return kh
	}
	run := func(kh string) (string, string, int) {
		return c.RunLauncher(t, fake(t, 2, c.HostList(1), "exit:0", "--known-hosts", kh, "--start-timeout", "10m")...)
	}
	if _, stderr, code := run(knownHosts(ca)); code != 0 {
		t.Errorf("@cert-authority of the agents' CA: exit %d\nstderr:\n%s", code, stderr)
	}
	// A launcher that retried the refusal would outlast the harness's
	// deadline, well short of the 10m start timeout, and fail the test.
	_, stderr, code := run(knownHosts(other))
	if code != 1 || !strings.Contains(stderr, "untrusted host certificate for "+c.Hosts[0].HostPort()) || !strings.Contains(stderr, "@cert-authority") {
		t.Errorf("@cert-authority of another CA: exit %d\nstderr:\n%s\nwant exit 1 and an untrusted certificate named", code, stderr)
	}
	t.Logf("another CA:\n%s", stderr)
	if _, stderr, code := run(c.KnownHosts); code != 0 {
		t.Errorf("plain known_hosts lines: exit %d\nstderr:\n%s", code, stderr)
	}
}

var servingRE = regexp.MustCompile(`"msg":"serving".*?"addr":"([0-9.]+):(\d+)"`)

// TestNonRootAgent: a real agent process run as a user (not root)
// refuses the launcher's root login with a message that says why, and
// runs the user's own job.
func TestNonRootAgent(t *testing.T) {
	agenttest.RequireRoot(t)
	t.Parallel()
	u := agenttest.NewUser(t, "")
	keys := u.NewKeys(t)
	_, agentBin := e2e.BuildBinaries(t)

	// The agent binary, its host key and its state where the user can
	// reach them.
	bin, err := os.MkdirTemp("", "gangway-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(bin, "agent")
	copyFile(t, exe, agentBin, 0o755)
	state := filepath.Join(u.Home, "gangway")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	ac := agenttest.NewCluster(t, 1)
	h := ac.Hosts[0]
	hostKey := filepath.Join(state, "host_key")
	copyFile(t, hostKey, h.HostKey, 0o600)
	for _, p := range []string{state, hostKey} {
		if err := os.Chown(p, int(u.Uid), int(u.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	p := e2e.StartProc(t, nil, "setpriv", "--reuid="+strconv.Itoa(int(u.Uid)), "--regid="+strconv.Itoa(int(u.Gid)), "--init-groups", "--",
		exe, "--listen", h.Addr+":0", "--host-key", hostKey, "--authorized-keys", filepath.Join(state, "authorized_keys"),
		"--name", h.Name, "--log-format", "json")
	s, ok := p.Stderr.WaitFor(e2e.Deadline, servingRE.MatchString)
	if !ok {
		t.Fatalf("the agent did not start serving:\n%s", s)
	}
	h.Port, _ = strconv.Atoi(servingRE.FindStringSubmatch(s)[2])
	ac.WriteKnownHosts(t)
	c := &e2e.Cluster{Cluster: ac}

	_, stderr, code := c.RunLauncher(t, "-i", keys.ClientKey, "-np", "1", "-H", fmt.Sprintf("root@%s:1:%d", h.Addr, h.Port), "true")
	want := "authentication refused for user root: gangway agent: this agent runs as user " + u.Name + ", not as root"
	if code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("root at %s's agent: exit %d\nstderr:\n%s\nwant exit 1 and %q", u.Name, code, stderr, want)
	}
	cwd, _ := os.Getwd()
	l := c.StartLauncher(t, append([]string{"-l", "-i", keys.ClientKey, "-np", "1", "-H", asUser(u.Name, h, 1)}, waitingRank...)...)
	checkRankRunsAs(t, l, u, cwd)
}

func copyFile(t *testing.T, dst, src string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
