/*
 * namepub: MPI's name service across the job (MPICH's test/mpi
 * spawn/namepub in miniature).
 *
 * Rank 0 publishes a service name with MPI_Publish_name; after a barrier
 * every other rank looks it up with MPI_Lookup_name and checks the port
 * name; rank 0 then unpublishes it, and after another barrier every rank
 * checks that a lookup now fails. Each rank prints one line:
 *   rank R lookup ok unpublished ok
 * or says what went wrong, and exits 1.
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#define SERVICE "gangway-namepub"

int main(int argc, char **argv)
{
    int rank, size, err, ok = 1;
    char port[MPI_MAX_PORT_NAME], want[MPI_MAX_PORT_NAME];
    const char *lookup = "ok", *gone = "ok";

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);

    snprintf(want, sizeof want, "gangway-port-of-%d-ranks", size);
    if (rank == 0 && MPI_Publish_name(SERVICE, MPI_INFO_NULL, want) != MPI_SUCCESS) {
        fprintf(stderr, "rank 0: MPI_Publish_name failed\n");
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    memset(port, 0, sizeof port);
    err = MPI_Lookup_name(SERVICE, MPI_INFO_NULL, port);
    if (err != MPI_SUCCESS) {
        lookup = "FAILED";
        ok = 0;
    } else if (strcmp(port, want) != 0) {
        lookup = "WRONG";
        ok = 0;
    }
    MPI_Barrier(MPI_COMM_WORLD);

    if (rank == 0 && MPI_Unpublish_name(SERVICE, MPI_INFO_NULL, want) != MPI_SUCCESS) {
        fprintf(stderr, "rank 0: MPI_Unpublish_name failed\n");
        ok = 0;
    }
    MPI_Barrier(MPI_COMM_WORLD);

    if (MPI_Lookup_name(SERVICE, MPI_INFO_NULL, port) == MPI_SUCCESS) {
        gone = "STILL-FOUND";
        ok = 0;
    }

    printf("rank %d lookup %s unpublished %s\n", rank, lookup, gone);
    fflush(stdout);
    MPI_Finalize();
    return ok ? 0 : 1;
}
