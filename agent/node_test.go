package agent

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/account"
	"github.com/gangway-hpc/gangway/agent/facts"
	"github.com/gangway-hpc/gangway/agent/wire"
)

// TestPrepareNodeDropCaches: the drop goes to drop_caches under the
// agent's SysRoot, and only when the agent allows it.
func TestPrepareNodeDropCaches(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "proc", "sys", "vm", "drop_caches")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	written := func() string {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	a := &Agent{Facts: facts.Options{SysRoot: root}}
	for _, tc := range []struct {
		allow bool
		login account.Login
		level int
		err   string
	}{
		{true, account.Login{}, 0, ""},
		{true, account.Login{}, 4, "drop_caches 4: want 1, 2 or 3"},
		{false, account.Login{}, 3, "does not allow dropping caches"},
		{true, account.Login{NoDropCaches: "user u may not drop page caches"}, 3, "user u may not drop page caches"},
		{false, account.Login{NoDropCaches: "user u may not drop page caches"}, 3, "does not allow dropping caches"},
	} {
		a.AllowDropCaches = tc.allow
		res := a.prepareNode(wire.Prepare{DropCaches: tc.level}, tc.login)
		if tc.err == "" && res != (wire.Prepared{}) || tc.err != "" && !strings.Contains(res.Err, tc.err) {
			t.Errorf("allow %v, drop_caches %d: %+v, want error %q", tc.allow, tc.level, res, tc.err)
		}
		if got := written(); got != "" {
			t.Fatalf("allow %v, drop_caches %d: wrote %q", tc.allow, tc.level, got)
		}
	}
	a.AllowDropCaches = true
	if res := a.prepareNode(wire.Prepare{DropCaches: 3}, account.Login{}); res.Err != "" || res.Took <= 0 {
		t.Fatalf("drop_caches 3: %+v", res)
	}
	if got := written(); got != "3" {
		t.Errorf("%s holds %q, want 3", file, got)
	}
}

// TestOnTmpfs: /dev/shm is a tmpfs on Linux hosts with one; a directory
// on the test's file system is whatever statfs says, and a file is never.
func TestOnTmpfs(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if onTmpfs(f) || onTmpfs("/nonexistent-dir") {
		t.Error("a file or a missing directory counted as a tmpfs directory")
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &fs); err == nil && fs.Type == 0x01021994 && syscall.Access("/dev/shm", 0o3) == nil {
		if !onTmpfs("/dev/shm") {
			t.Error("/dev/shm is a writable tmpfs, onTmpfs says no")
		}
	}
	t.Logf("error files under %s", errorFileBase())
}

// TestProbeListener: a probe connects, finds the connection closed by the
// other end, and Close stops the listener (a later dial is refused).
func TestProbeListener(t *testing.T) {
	pl, err := ListenProbes()
	if err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(pl.Port()))
	for range 3 {
		if r := dial(t.Context(), target, 5*time.Second); r.Err != "" {
			t.Fatalf("probe of %s: %s", target, r.Err)
		}
	}
	c, err := net.Dial("tcp", target)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Errorf("read from a probe connection: %d bytes, %v; want EOF", n, err)
	}
	c.Close()
	if err := pl.Close(); err != nil {
		t.Fatal(err)
	}
	if r := dial(t.Context(), target, 5*time.Second); r.Err == "" {
		t.Errorf("probe of %s after Close succeeded", target)
	}
}
