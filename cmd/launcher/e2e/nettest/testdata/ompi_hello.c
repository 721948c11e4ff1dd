/*
 * ompi_hello: a small MPI program for the Open MPI tests of cmd/launcher/e2e/nettest.
 *
 * Every rank prints exactly one line:
 *   ompi rank R size N sum S
 * where S is MPI_Allreduce(SUM) of the ranks, so a job that fell apart
 * into singletons (size 1) or lost a rank shows in the numbers.
 */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size, sum = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("ompi rank %d size %d sum %d\n", rank, size, sum);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
