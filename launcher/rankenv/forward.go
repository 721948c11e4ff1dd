package rankenv

import (
	"slices"
	"strings"

	"github.com/gangway-hpc/gangway/internal/environ"
	"github.com/gangway-hpc/gangway/launcher/cli"
)

// hostName is a name, or with a trailing * every name with that prefix,
// that describes the launcher's host, login or session rather than the
// job: the default (-genvall) does not carry it to the ranks, which get
// their own host's value (the agent's environment, or the login's
// identity) instead. Why is the reason, for docs/environment.md.
type hostName struct {
	Name, Why string
}

// hostSpecific is the list (documented in docs/environment.md, section
// "What travels"). Hydra leaves out DISPLAY (ssh), SLURM_* (slurm), LSB_*
// (lsf) and the like; this list does the same for every transport and
// adds what a login shell and an outer launcher set.
var hostSpecific = []hostName{
	{"HOSTNAME", "the launcher's host name"},
	{"HOST", "csh's HOSTNAME"},
	{"HOME", "the agent sets the login's own"},
	{"USER", "the agent sets the login's own"},
	{"LOGNAME", "the agent sets the login's own"},
	{"SHELL", "the agent sets the login's own"},
	{"MAIL", "the login's mailbox on the launcher's host"},
	{"PWD", "the shell's directory; ranks run in -wdir (default the launcher's directory)"},
	{"OLDPWD", "the shell's previous directory"},
	{"SHLVL", "shell nesting depth"},
	{"_", "the shell's last command"},
	{"DISPLAY", "the launcher's X display (Hydra leaves it out too)"},
	{"XAUTHORITY", "the X cookie file of the launcher's session"},
	{"WINDOWID", "the launcher's terminal window"},
	{"SSH_*", "the launcher's own SSH login (SSH_CONNECTION, SSH_CLIENT, SSH_TTY) and agent socket (SSH_AUTH_SOCK), a path on this host"},
	{"XDG_RUNTIME_DIR", "a per-login directory of this host (/run/user/UID)"},
	{"XDG_SESSION_*", "the launcher's login session"},
	{"XDG_SEAT", "the launcher's login session"},
	{"XDG_VTNR", "the launcher's login session"},
	{"DBUS_SESSION_BUS_ADDRESS", "a socket of the launcher's session"},
	{"KRB5CCNAME", "a credential cache on the launcher's host"},
	{"TMUX", "a tmux socket on the launcher's host"},
	{"TMUX_PANE", "a tmux pane on the launcher's host"},
	{"STY", "a screen session on the launcher's host"},
	{"TMPDIR", "often a per-session or per-job directory of this host (Slurm's, systemd's); the host's own is used; -x TMPDIR forwards it"},
	{"SLURM_*", "the launcher's node and step in the allocation; agents started by srun have their own (Hydra leaves them out under Slurm)"},
	{"SLURMD_NODENAME", "the launcher's node"},
	{"PBS_*", "the launcher's node and task in a PBS job"},
	{"LSB_*", "the launcher's LSF job and host (Hydra leaves them out under LSF)"},
	{"K_MPI_JOB_ROLE", "mpi-operator's role of the launcher's pod (\"launcher\"; a worker pod's own says \"worker\")"},
	{"PMI_*", "an outer launcher's PMI (PMI_PORT, PMI_FD would make MPICH dial it); the ranks get their own"},
	{"PMIX_*", "an outer launcher's PMIx server"},
	{"OMPI_*", "an outer mpirun's rank and daemon (OMPI_MCA_* are kept: mpirun forwards them too)"},
	{"TORCHELASTIC_*", "an outer torchrun's agent store and error file; the ranks get their own"},
	{"GANGWAY_*", "the launcher's and agents' own controls (GANGWAY_SRUN_LAUNCHER_KEY...); the ranks get GANGWAY_JOB_ID and GANGWAY_HOST"},
}

// HostSpecific reports whether the default (-genvall) leaves the
// launcher's variable k out of the ranks' environment, and why.
func HostSpecific(k string) (why string, ok bool) {
	if strings.HasPrefix(k, "OMPI_MCA_") {
		return "", false
	}
	for _, h := range hostSpecific {
		if p, isPrefix := strings.CutSuffix(h.Name, "*"); isPrefix && strings.HasPrefix(k, p) || h.Name == k {
			return h.Why, true
		}
	}
	return "", false
}

// HostSpecificNames is the list, in its documented order, each name (or
// PREFIX*) with why it stays home.
func HostSpecificNames() [][2]string {
	out := make([][2]string, len(hostSpecific))
	for i, h := range hostSpecific {
		out[i] = [2]string{h.Name, h.Why}
	}
	return out
}

// Forwarded is the part of the launcher's environment (env) that
// every rank gets, by mode, sorted KEY=VALUE with one entry per name (the
// last, as getenv reads it):
//
//   - cli.ForwardAll (the default, Hydra's -genvall): every variable but
//     the host-specific ones (HostSpecific);
//   - cli.ForwardNone (-genvnone): none;
//   - cli.ForwardList (-genvlist): the names listed, host-specific or not.
//
// Names need not be portable: bash's exported functions
// (BASH_FUNC_module%%, environment modules' module command) travel as
// Hydra carries them; entries without = or with an empty name do not. A
// pure function: table-tested, and the same for a run and a dry run.
func Forwarded(env []string, mode cli.ForwardMode, list []string) []string {
	if mode == cli.ForwardNone {
		return nil
	}
	kept := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		switch mode {
		case cli.ForwardList:
			if !slices.Contains(list, k) {
				continue
			}
		default:
			if _, home := HostSpecific(k); home {
				continue
			}
		}
		kept = append(kept, kv)
	}
	return environ.Merge(kept)
}
