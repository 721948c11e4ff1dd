package agent_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/agent"
	"github.com/gangway-hpc/gangway/agent/agenttest"
)

// statusLine is the value of a "Key:" line of /proc/PID/status text,
// its fields joined by single spaces.
func statusLine(status, key string) string {
	for _, line := range strings.Split(status, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == key {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return ""
}

// TestTracerRunsAsRanksUser: what a root agent runs for another user's
// ranks' stacks (gdb) runs with that user's uid, gid and supplementary
// groups, with no capability, except CAP_SYS_PTRACE alone where Yama's
// ptrace_scope is 1; nothing runs where it is 2. Its address space and
// core files are bounded, in / with a fixed environment.
func TestTracerRunsAsRanksUser(t *testing.T) {
	agenttest.RequireRoot(t)
	t.Parallel()
	u := agenttest.NewUser(t, "", "-G", "users")
	script := "cat /proc/self/status /proc/self/limits; pwd; env"
	uid, gid := strconv.Itoa(int(u.Uid)), strconv.Itoa(int(u.Gid))
	for _, tc := range []struct {
		scope int
		caps  string // CapPrm, CapEff and CapAmb
	}{{-1, "0000000000000000"}, {0, "0000000000000000"}, {1, "0000000000080000"}} {
		out, err := agent.RunAsTracer(t.Context(), u.Name, tc.scope, "/bin/sh", "-c", script)
		if err != nil {
			t.Fatalf("scope %d: %v\n%s", tc.scope, err, out)
		}
		for k, want := range map[string]string{"Uid": strings.Repeat(uid+" ", 3) + uid, "Gid": strings.Repeat(gid+" ", 3) + gid,
			"CapPrm": tc.caps, "CapEff": tc.caps, "CapAmb": tc.caps} {
			if got := statusLine(out, k); got != want {
				t.Errorf("scope %d: %s %q, want %q", tc.scope, k, got, want)
			}
		}
		if groups := strings.Fields(statusLine(out, "Groups")); len(groups) != 2 || !strings.Contains(" "+statusLine(out, "Groups")+" ", " 100 ") {
			t.Errorf("scope %d: Groups %v, want %s's own and users (100)", tc.scope, groups, u.Name)
		}
		for _, want := range []string{"Max address space         4294967296           4294967296", "Max core file size        0                    0",
			"\n/\n", "LC_ALL=C", "PATH=/usr/bin:/bin", "MALLOC_ARENA_MAX=2"} {
			if !strings.Contains(out, want) {
				t.Errorf("scope %d: output lacks %q:\n%s", tc.scope, want, out)
			}
		}
	}
	for _, scope := range []int{2, 3} {
		if out, err := agent.RunAsTracer(t.Context(), u.Name, scope, "/bin/sh", "-c", script); err == nil || !strings.Contains(err.Error(), "ptrace_scope is "+strconv.Itoa(scope)) {
			t.Errorf("scope %d: ran (%v), want it refused:\n%s", scope, err, out)
		}
	}
}
