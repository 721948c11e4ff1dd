// Package mpiabitest builds MPI test programs with the installed MPI
// compiler wrappers, for the tests of MPI detection and of the launcher.
package mpiabitest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// HelloC is an MPI hello: each rank prints "hello from RANK of SIZE".
const HelloC = `#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
	int rank, size;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	printf("hello from %d of %d\n", rank, size);
	MPI_Finalize();
	return 0;
}
`

// Compile runs a C compiler (cc, mpicc.openmpi, mpicc.mpich) on src
// written into dir as NAME.c, with args, and returns the program's path;
// it skips the test when the compiler is not installed.
func Compile(t testing.TB, cc, dir, name, src string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("%s not found (Debian: build-essential, libopenmpi-dev, libmpich-dev)", cc)
	}
	c := filepath.Join(dir, name+".c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command(cc, append([]string{"-o", out, c}, args...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, b)
	}
	return out
}
