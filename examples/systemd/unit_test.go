// Package systemd holds tests of gangway-agent.service only.
package systemd

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const unitFile = "gangway-agent.service"

// installedAgent is the ExecStart binary; `make install` rewrites this
// path to $(PREFIX)/bin/agent with sed, so it must stay literally this.
const installedAgent = "/usr/local/bin/agent"

// unit reads a unit file's settings: section -> key -> values in order.
func unit(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := map[string]map[string][]string{}
	sec := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || l[0] == '#' || l[0] == ';':
		case l[0] == '[' && l[len(l)-1] == ']':
			sec = l[1 : len(l)-1]
			if u[sec] == nil {
				u[sec] = map[string][]string{}
			}
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok || sec == "" {
				t.Fatalf("%s:%d: not a setting in a section: %q", path, n, l)
			}
			u[sec][strings.TrimSpace(k)] = append(u[sec][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// buildAgent builds the agent into a temporary directory.
func buildAgent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agent")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/gangway-hpc/gangway/cmd/agent").CombinedOutput()
	if err != nil {
		t.Fatalf("go build gangway/cmd/agent: %v\n%s", err, out)
	}
	return bin
}

// agentFlags are the flag names `agent --help` lists.
func agentFlags(t *testing.T, bin string) map[string]bool {
	t.Helper()
	out, _ := exec.CommandContext(t.Context(), bin, "--help").CombinedOutput()
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if !flags["listen"] || !flags["host-key"] {
		t.Fatalf("agent --help lists no --listen or --host-key: the help format changed?\n%s", out)
	}
	return flags
}

// TestUnit: the settings the README and the unit's comments promise
// (restart, kill the whole cgroup, delegation, unlimited locked memory,
// nothing that hides GPU or RDMA devices, home directories or the cgroup
// tree from ranks), ExecStart flags the agent knows, and, where
// systemd-analyze exists, a clean `systemd-analyze verify`.
func TestUnit(t *testing.T) {
	u := unit(t, unitFile)
	svc := u["Service"]
	want := map[string]string{
		"KillMode": "control-group", "Restart": "on-failure", "Delegate": "yes", "LimitMEMLOCK": "infinity",
	}
	for k, v := range want {
		if got := svc[k]; len(got) != 1 || got[0] != v {
			t.Errorf("[Service] %s = %v, want %s", k, got, v)
		}
	}
	if ty := svc["Type"]; len(ty) != 1 || (ty[0] != "exec" && ty[0] != "simple") {
		t.Errorf("[Service] Type = %v: the agent sends no sd_notify readiness, so exec or simple", ty)
	}
	// Settings that would hide from ranks what training needs.
	for k, bad := range map[string][]string{
		"PrivateDevices":        {"yes", "true", "1", "on"},
		"DevicePolicy":          {"closed", "strict"},
		"ProtectClock":          {"yes", "true", "1", "on"},
		"ProtectHome":           {"yes", "true", "1", "on", "read-only", "tmpfs"},
		"ProtectKernelTunables": {"yes", "true", "1", "on"},
		"ProtectControlGroups":  {"yes", "true", "1", "on"},
		"NoNewPrivileges":       {"yes", "true", "1", "on"},
		"DeviceAllow":           nil,
	} {
		for _, v := range svc[k] {
			if bad == nil || contains(bad, v) {
				t.Errorf("[Service] %s=%s would take from ranks what they need (see the unit's comments)", k, v)
			}
		}
	}
	if u["Install"]["WantedBy"] == nil {
		t.Errorf("no [Install] WantedBy: systemctl enable would do nothing")
	}
	exe := svc["ExecStart"]
	if len(exe) != 1 {
		t.Fatalf("ExecStart = %v, want one", exe)
	}
	argv := strings.Fields(exe[0])
	if argv[0] != installedAgent {
		t.Errorf("ExecStart runs %s, want %s (make install rewrites that path)", argv[0], installedAgent)
	}
	bin := buildAgent(t)
	flags := agentFlags(t, bin)
	for _, a := range argv[1:] {
		if strings.HasPrefix(a, "-") {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if !flags[name] {
				t.Errorf("ExecStart passes %s, which agent --help does not list", a)
			}
		}
	}

	t.Run("SystemdAnalyzeVerify", func(t *testing.T) {
		if _, err := exec.LookPath("systemd-analyze"); err != nil {
			t.Skip("systemd-analyze is not installed here: the unit is not verified by systemd")
		}
		// The unit as installed, its ExecStart pointing at a real agent
		// (verify checks that the binary is executable).
		b, err := os.ReadFile(unitFile)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), unitFile)
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(b), installedAgent, bin)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.CommandContext(t.Context(), "systemd-analyze", "verify", p).CombinedOutput()
		// Unknown keys and bad values are warnings with exit code 0: any
		// output about the unit fails too.
		if err != nil || strings.Contains(string(out), unitFile) {
			t.Errorf("systemd-analyze verify: %v\n%s", err, out)
		}
		t.Logf("systemd-analyze verify: %v %s", err, out)
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}
