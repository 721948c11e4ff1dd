//go:build envrule

package cli

import "testing"

// envLines are the other launchers' environment options (Hydra's -genv,
// -genvall, -genvnone, -genvlist, -env, -envall, -envnone, -envlist,
// and --env-file), which gangway takes once they are its own flags:
// `go test -tags envrule` runs them.
var envLines = []compatLine{
	{"Intel MPI developer reference, -genv", "mpirun -genv I_MPI_DEBUG 5 -n 2 ./a.out", "np=2; env.I_MPI_DEBUG=5", ""},
	{"", "mpiexec -genv OMP_NUM_THREADS 4 -genv KMP_AFFINITY compact -n 8 -ppn 4 -hosts n1,n2 ./a.out", "env.OMP_NUM_THREADS=4; env.KMP_AFFINITY=compact; N=4", ""},
	{"", "mpiexec -env OMP_NUM_THREADS 2 -n 4 ./a.out", "env.OMP_NUM_THREADS=2", ""},
	{"", "mpiexec -genvlist LD_LIBRARY_PATH,PATH -n 2 ./a.out", "env.LD_LIBRARY_PATH=/usr/local/cuda/lib64; env.PATH=/usr/bin:/bin", ""},
	{"", "mpiexec -envlist DISPLAY -n 2 ./a.out", "env.DISPLAY=:0", ""},
	{"", "mpiexec -genvall -n 2 ./a.out", "env.DISPLAY=:0; env.PATH=/usr/bin:/bin", ""},
	{"", "mpiexec -envall -n 2 ./a.out", "env.DISPLAY=:0", ""},
	{"", "mpiexec -genvnone -genv A 1 -n 2 ./a.out", "env.A=1", ""},
	{"", "mpiexec -envnone -n 2 ./a.out", "np=2", ""},
}

func TestCompatEnvLines(t *testing.T) { checkCompatLines(t, envLines) }
