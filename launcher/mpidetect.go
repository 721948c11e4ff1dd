package launcher

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/internal/mpiabi"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/diagnose"
)

// Open MPI programs under --mpi auto: Debian's Open MPI has no PMI client
// (docs/openmpi.md), so ranks started with gangway's PMI each run alone,
// "rank 0 of 1", and the job exits 0. Before anything runs, the launcher
// inspects the program on its own host (where it exists in most setups:
// a shared file system or one image everywhere; an agent-side check
// would need the job's start to carry a verdict back, and the launcher
// must decide between two ways of starting the job before it starts
// either): an ELF linked against Open MPI's libmpi is run through Open
// MPI's mpirun, as --mpi=openmpi does, or refused with the flag to use
// when an option stands in the way. Scripts (#!) and programs absent
// here are not inspected; -v says what was found.

// detectMPI inspects cfg's program and, for an Open MPI program, turns
// the job into --mpi=openmpi's. done says Main ends here with code.
func detectMPI(cfg *cli.Config, d Deps, getenv func(string) string) (code int, done bool) {
	if cfg.Mode != cli.ModeRun || !cfg.Env.MPIAuto || len(cfg.Argv) == 0 {
		return 0, false
	}
	dir := cfg.Env.Dir
	if dir == "" {
		dir = d.Cwd
	}
	rankEnv := func(k string) string {
		if v, ok := cfg.Env.Vars[k]; ok {
			return v
		}
		return getenv(k)
	}
	prog, ok := programPath(cfg.Argv[0], dir, rankEnv("PATH"))
	if !ok {
		d.Log.Debug("mpi: program not inspected: not found on this host", zap.String("program", cfg.Argv[0]))
		return 0, false
	}
	f, err := mpiabi.Detect(prog, mpiabi.Options{LibraryPath: rankEnv("LD_LIBRARY_PATH")})
	switch {
	case errors.Is(err, mpiabi.ErrNotELF):
		d.Log.Debug("mpi: program not inspected: not an ELF program (a script?)", zap.String("program", prog))
		return 0, false
	case err != nil:
		d.Log.Debug("mpi: program not inspected", zap.String("program", prog), zap.Error(err))
		return 0, false
	}
	d.Log.Debug("mpi: program inspected", zap.String("found", f.String()))
	if f.Family != mpiabi.OpenMPI {
		return 0, false
	}
	if err := cfg.DelegateToOpenMPI(); err != nil {
		fmt.Fprintf(d.Stderr, "launcher: %s is an Open MPI program (%s), whose ranks gangway's PMI cannot start (each would run alone, as rank 0 of 1); %v: run it with --mpi=openmpi without them, or --mpi=none to start the ranks as independent processes\n",
			cfg.Argv[0], why(f), strings.TrimPrefix(err.Error(), cli.ErrUsage.Error()+": "))
		return diagnose.ExitUsage, true
	}
	if !cfg.Out.Quiet {
		fmt.Fprintf(d.Stderr, "launcher: %s is an Open MPI program (%s): running it through Open MPI's mpirun, as --mpi=openmpi does (--mpi=pmi starts it with gangway's PMI anyway)\n",
			cfg.Argv[0], why(f))
	}
	return 0, false
}

// why is the short reason for a finding: the library, and the symbol or
// "by its name".
func why(f mpiabi.Finding) string {
	switch {
	case f.Library == "":
		return "it defines " + f.Symbol
	case f.Symbol == "":
		return "it needs " + f.Library
	}
	return "it needs " + f.Library + ", " + f.Path
}

// programPath finds the program a rank would run, on this host: a name
// with a slash relative to dir, else the first executable regular file
// of that name in path, else in dir (as the agents look it up).
func programPath(name, dir, path string) (string, bool) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		return name, executable(name)
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			continue
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		if p := filepath.Join(d, name); executable(p) {
			return p, true
		}
	}
	p := filepath.Join(dir, name)
	return p, executable(p)
}

func executable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}
