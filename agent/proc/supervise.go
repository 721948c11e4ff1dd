package proc

import (
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"syscall"
)

// A rank's supervisor is the agent's own binary re-executed in a hidden
// mode (Supervise), standing between the agent and the rank's program so
// that the rank's containment does not depend on the agent staying alive:
// the agent may be killed with SIGKILL, or by the OOM killer, and what the
// rank started still dies. Spec.Supervisor turns it on; its contract is
// SupervisorMain's.

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

// Supervise runs this process as a rank's supervisor when args (os.Args)
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
// pipe, the agent's pid (its expected parent), the program's path and
// the program's argv.
func supervisorArgs(ctlFD, parent int, path string, argv []string) []string {
	return append([]string{supervisorArgv0, superviseArg, strconv.Itoa(ctlFD), strconv.Itoa(parent), path}, argv...)
}

// supervisorCmd is a parsed supervisor command line (SupervisorMain's
// args).
type supervisorCmd struct {
	ctlFD  int
	parent int
	path   string
	argv   []string
}

var errSupervisorUsage = errors.New("usage: " + supervisorArgv0 + " " + superviseArg + " CTLFD PARENT PATH ARGV0 [ARGS...]")

func parseSupervisorArgs(args []string) (supervisorCmd, error) {
	if len(args) < 4 {
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
	if args[2] == "" {
		return supervisorCmd{}, fmt.Errorf("%w: empty path", errSupervisorUsage)
	}
	return supervisorCmd{ctlFD: fd, parent: parent, path: args[2], argv: args[3:]}, nil
}
