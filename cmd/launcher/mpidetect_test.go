package main

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/internal/mpiabi/mpiabitest"
)

// buildMPIHello compiles mpiabitest's hello program with an MPI compiler
// wrapper, or skips when it is not installed.
func buildMPIHello(t *testing.T, cc string) string {
	t.Helper()
	return mpiabitest.Compile(t, cc, t.TempDir(), "hello", mpiabitest.HelloC)
}

// TestOpenMPIProgramAuto: an Open MPI program under the default --mpi
// auto ran as N singletons ("hello from 0 of 1" N times, exit 0, silent
// even with -v). It now runs through Open MPI's mpirun, saying so; an
// option mpirun does not get refuses it with the flag to use; --mpi=pmi
// still starts it with PMI; -v says what an MPICH program is.
func TestOpenMPIProgramAuto(t *testing.T) {
	if _, err := exec.LookPath("mpirun.openmpi"); err != nil {
		t.Skip("mpirun.openmpi not found (Debian: openmpi-bin)")
	}
	ompi := buildMPIHello(t, "mpicc.openmpi")
	t.Run("delegated", func(t *testing.T) {
		l := startLauncher(t, false, "-np", "3", ompi)
		assertCode(t, l, 0)
		out := l.stdout()
		for _, want := range []string{"hello from 0 of 3\n", "hello from 1 of 3\n", "hello from 2 of 3\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("stdout lacks %q:\n%s", want, out)
			}
		}
		if !strings.Contains(l.stderr(), "is an Open MPI program (it needs libmpi.so.40, ") ||
			!strings.Contains(l.stderr(), "running it through Open MPI's mpirun") {
			t.Errorf("stderr does not say why mpirun runs it:\n%s", l.stderr())
		}
	})
	// Without -np, as many ranks as a PMI job gets here (one per GPU,
	// else per CPU), not mpirun's one slot.
	t.Run("default count", func(t *testing.T) {
		pmi := startLauncher(t, false, "--mpi=pmi", ompi)
		assertCode(t, pmi, 0)
		n := strings.Count(pmi.stdout(), "hello from 0 of 1\n")
		l := startLauncher(t, false, ompi)
		assertCode(t, l, 0)
		if n < 1 || strings.Count(l.stdout(), fmt.Sprintf(" of %d\n", n)) != n {
			t.Errorf("--mpi=pmi started %d singletons; delegated:\n%s", n, l.stdout())
		}
	})
	t.Run("refused", func(t *testing.T) {
		l := startLauncher(t, false, "-np", "2", "-rank-by", "slot", ompi)
		assertCode(t, l, 2)
		if e := l.stderr(); !strings.Contains(e, "is an Open MPI program") || !strings.Contains(e, "gets no -rank-by") ||
			!strings.Contains(e, "--mpi=openmpi") || l.stdout() != "" {
			t.Errorf("stdout %q, stderr:\n%s", l.stdout(), e)
		}
	})
	t.Run("pmi forced", func(t *testing.T) {
		l := startLauncher(t, false, "--mpi=pmi", "-np", "2", ompi)
		assertCode(t, l, 0)
		if n := strings.Count(l.stdout(), "hello from 0 of 1\n"); n != 2 || strings.Contains(l.stderr(), "Open MPI program") {
			t.Errorf("--mpi=pmi: %d singletons, stderr:\n%s", n, l.stderr())
		}
	})
	t.Run("mpich", func(t *testing.T) {
		mpich := buildMPIHello(t, "mpicc.mpich")
		l := startLauncher(t, false, "-v", "-np", "2", mpich)
		assertCode(t, l, 0)
		if !strings.Contains(l.stderr(), "MPICH (needs libmpich.so.12: ") || strings.Contains(l.stderr(), "Open MPI program") {
			t.Errorf("-v does not say it found MPICH:\n%s", l.stderr())
		}
		for _, want := range []string{"hello from 0 of 2\n", "hello from 1 of 2\n"} {
			if !strings.Contains(l.stdout(), want) {
				t.Errorf("stdout lacks %q:\n%s", want, l.stdout())
			}
		}
	})
}
