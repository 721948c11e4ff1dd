package proc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
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
// pipe, the agent's pid (its expected parent), the credential the program
// runs with (nil: the supervisor's own), the program's path and the
// program's argv.
func supervisorArgs(ctlFD, parent int, cred *syscall.Credential, path string, argv []string) []string {
	return append([]string{supervisorArgv0, superviseArg, strconv.Itoa(ctlFD), strconv.Itoa(parent), formatCred(cred), path}, argv...)
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
	path   string
	argv   []string
}

var errSupervisorUsage = errors.New("usage: " + supervisorArgv0 + " " + superviseArg + " CTLFD PARENT CRED PATH ARGV0 [ARGS...]")

func parseSupervisorArgs(args []string) (supervisorCmd, error) {
	if len(args) < 5 {
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
	if args[3] == "" {
		return supervisorCmd{}, fmt.Errorf("%w: empty path", errSupervisorUsage)
	}
	return supervisorCmd{ctlFD: fd, parent: parent, cred: cred, path: args[3], argv: args[4:]}, nil
}
