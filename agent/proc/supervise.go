package proc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// A job's supervisor is the agent's own binary re-executed in a hidden
// mode (Supervise), standing between the agent and the programs of the
// job's ranks on this host so that their containment does not depend on
// the agent staying alive: the agent may be killed with SIGKILL, or by
// the OOM killer, and what the ranks started still dies. One supervisor
// runs every rank of a StartGroup call (a job's ranks on one host), so a
// launch costs one re-execution per host, not one per rank.
// Spec.Supervisor turns it on; its contract is SupervisorMain's.

// superviseArg is argv[1] of a supervisor. Nobody types it: the agent
// writes it, and main dispatches on it before anything else.
const superviseArg = "-gangway-supervise"

// supervisorArgv0 is argv[0] of every supervisor, for ps.
const supervisorArgv0 = "gangway-supervisor"

// parentDeathSignal is the supervisor's parent-death signal (set by the
// agent through SysProcAttr.Pdeathsig, so the fork closes the race with
// the agent's death). A real-time signal (SIGRTMIN+6 in glibc's
// numbering) that nobody else sends: the kernel also sends it when the
// agent thread that forked the supervisor exits, so the supervisor checks
// that its parent really changed before acting on it, and never mistakes
// it for a signal to forward.
const parentDeathSignal = syscall.Signal(40)

// dispatches is set once this process has called Supervise without being
// a supervisor: its binary is then known to dispatch, and may be
// re-executed as one.
var dispatches atomic.Bool

// Supervise runs this process as a job's supervisor when args (os.Args)
// ask for one, and returns SupervisorMain's exit status and true;
// otherwise it returns false at once. cmd/agent and cmd/launcher call it
// first thing in main, and test binaries that run ranks through agents
// first thing in TestMain (before proctest.HelperMain: a supervisor gets
// the rank's environment): nothing of the agent runs in a supervisor, no
// logger, no flag parsing.
func Supervise(args []string) (code int, ok bool) {
	if len(args) < 2 || args[1] != superviseArg {
		dispatches.Store(true)
		return 0, false
	}
	return SupervisorMain(args[2:]), true
}

// SupervisorExecutable is the Spec.Supervisor value that re-executes this
// binary: "" unless this process called Supervise (a binary that does not
// dispatch would run its own main, or a test binary its tests, in every
// rank) or on systems without supervisors.
func SupervisorExecutable() string {
	if !dispatches.Load() || !supervisorSupported {
		return ""
	}
	return selfExe
}

// supervisorArgs is a supervisor's command line: the fd of its control
// socket, the agent's pid (its expected parent) and the credential its
// programs run with (nil: the supervisor's own). What to run comes over
// the control socket (superSpec).
func supervisorArgs(ctlFD, parent int, cred *syscall.Credential) []string {
	return []string{supervisorArgv0, superviseArg, strconv.Itoa(ctlFD), strconv.Itoa(parent), formatCred(cred)}
}

// formatCred writes a credential as "UID:GID:G1,G2,..." ("UID:GID:" with
// no supplementary groups); "-" is none.
func formatCred(c *syscall.Credential) string {
	if c == nil {
		return "-"
	}
	groups := make([]string, len(c.Groups))
	for i, g := range c.Groups {
		groups[i] = strconv.FormatUint(uint64(g), 10)
	}
	return fmt.Sprintf("%d:%d:%s", c.Uid, c.Gid, strings.Join(groups, ","))
}

// parseCred reads formatCred's form.
func parseCred(s string) (*syscall.Credential, error) {
	if s == "-" {
		return nil, nil
	}
	f := strings.Split(s, ":")
	if len(f) != 3 {
		return nil, fmt.Errorf("credential %q: want UID:GID:GROUPS", s)
	}
	id := func(s string) (uint32, error) {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("credential: id %q", s)
		}
		return uint32(n), nil
	}
	uid, err := id(f[0])
	if err != nil {
		return nil, err
	}
	gid, err := id(f[1])
	if err != nil {
		return nil, err
	}
	c := &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}
	if f[2] != "" {
		for _, g := range strings.Split(f[2], ",") {
			n, err := id(g)
			if err != nil {
				return nil, err
			}
			c.Groups = append(c.Groups, n)
		}
	}
	return c, nil
}

// supervisorCmd is a parsed supervisor command line (SupervisorMain's
// args).
type supervisorCmd struct {
	ctlFD  int
	parent int
	cred   *syscall.Credential
}

var errSupervisorUsage = errors.New("usage: " + supervisorArgv0 + " " + superviseArg + " CTLFD PARENT CRED")

func parseSupervisorArgs(args []string) (supervisorCmd, error) {
	if len(args) != 3 {
		return supervisorCmd{}, errSupervisorUsage
	}
	fd, err := strconv.Atoi(args[0])
	if err != nil || fd < 3 {
		return supervisorCmd{}, fmt.Errorf("%w: control fd %q", errSupervisorUsage, args[0])
	}
	parent, err := strconv.Atoi(args[1])
	if err != nil || parent < 1 {
		return supervisorCmd{}, fmt.Errorf("%w: parent %q", errSupervisorUsage, args[1])
	}
	cred, err := parseCred(args[2])
	if err != nil {
		return supervisorCmd{}, fmt.Errorf("%w: %w", errSupervisorUsage, err)
	}
	return supervisorCmd{ctlFD: fd, parent: parent, cred: cred}, nil
}

// superSpec is what a supervisor runs: the first line the agent writes to
// its control socket, in JSON.
type superSpec struct {
	// Env is what every program's environment has; each program's Env
	// adds the rest (a job's ranks differ in a few variables: RANK,
	// LOCAL_RANK, PMI_FD, ...), so the line stays short to write and read.
	Env   []string    `json:"env,omitempty"`
	Ranks []superRank `json:"ranks"`
}

// splitEnv returns the KEY=VALUE entries every one of envs has, and for
// each env the rest, in their order.
func splitEnv(envs [][]string) (common []string, rest [][]string) {
	rest = make([][]string, len(envs))
	if len(envs) < 2 {
		copy(rest, envs)
		return nil, rest
	}
	count := map[string]int{}
	for _, env := range envs {
		seen := map[string]bool{}
		for _, kv := range env {
			if !seen[kv] {
				seen[kv] = true
				count[kv]++
			}
		}
	}
	for _, kv := range envs[0] {
		if count[kv] == len(envs) {
			common = append(common, kv)
			count[kv] = -1 // once
		}
	}
	for i, env := range envs {
		for _, kv := range env {
			if count[kv] != -1 {
				rest[i] = append(rest[i], kv)
			}
		}
	}
	return common, rest
}

// superRank is one program of a superSpec.
type superRank struct {
	Path string   `json:"path"`
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir,omitempty"`
	// Files are the supervisor's fds that become the program's fds 0, 1,
	// 2, 3, ...; -1 is the supervisor's own stdin, /dev/null (StartGroup
	// starts it so), for a program's stdin.
	Files []int `json:"files"`
	CPUs  []int `json:"cpus,omitempty"`
}
