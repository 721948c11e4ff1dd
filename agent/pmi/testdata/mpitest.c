/*
 * mpitest: a real MPI program for the agent/pmi tests.
 *
 * Every rank prints exactly one line:
 *   rank R size N local L/LN sum S bcast ok
 * where L/LN come from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) (so they
 * show how MPICH read PMI_process_mapping), S is MPI_Allreduce(SUM) of the
 * ranks, and "bcast ok" checks a 1 MiB MPI_Bcast from rank 0 byte by byte.
 *
 * With argv[1] == "abort", rank 1 calls MPI_Abort(MPI_COMM_WORLD, 9) right
 * after MPI_Init and the others block in the next collective.
 *
 * With argv[1] == "hang", rank 2 sleeps for an hour after MPI_Init
 * instead of joining the first collective, where the others wait: a hang
 * as --hang-timeout finds it, with no rank printing anything.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BCAST_BYTES (1 << 20)

static unsigned char pattern(size_t i) { return (unsigned char)(i * 31u + 7u); }

int main(int argc, char **argv)
{
    int rank, size, lrank, lsize, sum = 0, ok = 1;
    MPI_Comm node;
    unsigned char *buf;
    size_t i;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    if (argc > 1 && strcmp(argv[1], "abort") == 0 && rank == 1) {
        fprintf(stderr, "rank 1 calling MPI_Abort(MPI_COMM_WORLD, 9)\n");
        MPI_Abort(MPI_COMM_WORLD, 9);
    }

    if (argc > 1 && strcmp(argv[1], "hang") == 0 && rank == 2)
        sleep(3600);

    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &lrank);
    MPI_Comm_size(node, &lsize);

    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);

    buf = malloc(BCAST_BYTES);
    if (buf == NULL) {
        fprintf(stderr, "rank %d: malloc failed\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (i = 0; i < BCAST_BYTES; i++)
        buf[i] = rank == 0 ? pattern(i) : 0;
    MPI_Bcast(buf, BCAST_BYTES, MPI_BYTE, 0, MPI_COMM_WORLD);
    for (i = 0; i < BCAST_BYTES; i++) {
        if (buf[i] != pattern(i)) {
            ok = 0;
            break;
        }
    }
    free(buf);

    printf("rank %d size %d local %d/%d sum %d bcast %s\n", rank, size, lrank, lsize, sum,
           ok ? "ok" : "BAD");
    fflush(stdout);

    MPI_Comm_free(&node);
    MPI_Finalize();
    return ok ? 0 : 1;
}
