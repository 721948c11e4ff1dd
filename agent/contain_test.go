package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/gangway-hpc/gangway/agent/proc"
	"github.com/gangway-hpc/gangway/agent/wire"
)

// TestContainmentFact: Facts say what holds the agent's ranks.
func TestContainmentFact(t *testing.T) {
	sup := proc.SupervisorExecutable()
	if sup == "" {
		t.Fatal("no supervisor executable: TestMain must call proc.Supervise")
	}
	parent, cgErr := proc.FindCgroupParent()
	auto := "subreaper supervisor (no writable cgroup2: "
	if cgErr == nil {
		auto = "cgroup2 " + parent.Dir() + " + subreaper supervisor"
	}
	for _, tc := range []struct {
		name string
		a    *Agent
		want string
	}{
		{"supervisor, cgroup where writable", &Agent{Supervisor: sup}, auto},
		{"supervisor, --cgroup=false", &Agent{Supervisor: sup, NoCgroup: true}, "subreaper supervisor (no writable cgroup2: turned off)"},
		{"neither", &Agent{NoCgroup: true}, "process groups only (no supervisor; no writable cgroup2: turned off)"},
	} {
		tc.a.Name, tc.a.Version, tc.a.Log = "h0", "test", zaptest.NewLogger(t)
		c := serve(t, tc.a)
		c.send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "facts", Host: "h0"})
		var f wire.Facts
		c.recv(wire.KindFacts, &f)
		if !strings.HasPrefix(f.Containment, tc.want) {
			t.Errorf("%s: Containment %q, want %q", tc.name, f.Containment, tc.want)
		}
	}
}

// TestJobCgroupLifecycle: a job's ranks run in the job's cgroup, under
// supervisors that report the programs' pids, and the group is gone by
// the time the job is Done.
func TestJobCgroupLifecycle(t *testing.T) {
	if _, err := proc.FindCgroupParent(); err != nil {
		if os.Getenv("GANGWAY_REQUIRE_ROOT_TESTS") == "1" {
			t.Fatalf("no writable cgroup2 (%v) and GANGWAY_REQUIRE_ROOT_TESTS=1", err)
		}
		t.Skipf("no writable cgroup2: %v", err)
	}
	a := &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t), Supervisor: proc.SupervisorExecutable()}
	c := serve(t, a)
	c.startJob(wire.StartJob{JobID: "cgjob", Ranks: []wire.RankSpec{{Rank: 0, Argv: []string{"/bin/sh", "-c", "echo $$; grep ^0:: /proc/self/cgroup"},
		// The supervisor is this test binary: no race detector's sleep at exit.
		Env: []string{"GORACE=atexit_sleep_ms=0"}}}})
	var out strings.Builder
	var started wire.Started
	var exit wire.Exit
	for {
		m, err := c.conn.Recv()
		if err != nil {
			t.Fatal(err)
		}
		switch m.Kind {
		case wire.KindOutput:
			_, _, data, err := m.Output()
			if err != nil {
				t.Fatal(err)
			}
			out.Write(data)
			continue
		case wire.KindStarted:
			if err := m.Decode(&started); err != nil {
				t.Fatal(err)
			}
			continue
		case wire.KindExit:
			if err := m.Decode(&exit); err != nil {
				t.Fatal(err)
			}
			continue
		case wire.KindDone:
		default:
			t.Fatalf("got %s (%s)", m.Kind, m.Payload)
		}
		break
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || exit.Code != 0 {
		t.Fatalf("exit %+v, output %q", exit, out.String())
	}
	pid, _ := strconv.Atoi(lines[0])
	if started.Pids[0] != pid || exit.Pid != pid {
		t.Errorf("Started.Pids %v, Exit.Pid %d: want the program's pid %d", started.Pids, exit.Pid, pid)
	}
	group := filepath.Base(strings.TrimPrefix(lines[1], "0::"))
	if !strings.HasPrefix(group, "gangway-"+strconv.Itoa(os.Getpid())+"-") || !strings.HasSuffix(group, "-cgjob") {
		t.Fatalf("rank ran in cgroup %q, want the job's gangway-%d-N-cgjob", lines[1], os.Getpid())
	}
	parent, _ := proc.FindCgroupParent()
	if _, err := os.Stat(filepath.Join(parent.Dir(), group)); !os.IsNotExist(err) {
		t.Errorf("job cgroup %s still there after Done: %v", group, err)
	}
}
