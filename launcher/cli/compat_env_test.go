package cli

import "testing"

// envLines are the other launchers' environment options: Hydra's -genv,
// -genvall, -genvnone, -genvlist, -env, -envall, -envnone, -envlist.
var envLines = []compatLine{
	{"Intel MPI developer reference, -genv", "mpirun -genv I_MPI_DEBUG 5 -n 2 ./a.out", "np=2; env.I_MPI_DEBUG=5", ""},
	{"", "mpiexec -genv OMP_NUM_THREADS 4 -genv KMP_AFFINITY compact -n 8 -ppn 4 -hosts n1,n2 ./a.out", "env.OMP_NUM_THREADS=4; env.KMP_AFFINITY=compact; N=4", ""},
	{"", "mpiexec -env OMP_NUM_THREADS 2 -n 4 ./a.out", "env.OMP_NUM_THREADS=2", ""},
	{"", "mpiexec -genvlist LD_LIBRARY_PATH,PATH -n 2 ./a.out", "forward=list; forwardlist=LD_LIBRARY_PATH,PATH", ""},
	{"", "mpiexec -envlist DISPLAY -n 2 ./a.out", "forward=list; forwardlist=DISPLAY", ""},
	{"", "mpiexec -genvall -n 2 ./a.out", "forward=all", ""},
	{"", "mpiexec -envall -n 2 ./a.out", "forward=all", ""},
	{"", "mpiexec -genvnone -genv A 1 -n 2 ./a.out", "forward=none; env.A=1", ""},
	{"", "mpiexec -envnone -n 2 ./a.out", "np=2; forward=none", ""},
}

func TestCompatEnvLines(t *testing.T) { checkCompatLines(t, envLines) }
