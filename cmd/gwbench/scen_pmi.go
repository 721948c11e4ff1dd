package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// pmibenchSrc is the MPICH program of scenario 3. "initfini" only calls
// MPI_Init and MPI_Finalize; "barrier ITERS MPIITERS" also times ITERS
// empty PMI-1 barriers, sent on the rank's own PMI socket (PMI_FD) after
// MPI_Init as MPICH's simple PMI client sends them, and MPIITERS
// MPI_Barriers. Every rank prints its MPI_Init and MPI_Finalize times.
const pmibenchSrc = `/* pmibench: written by gwbench (cmd/gwbench/scen_pmi.go). */
#include <mpi.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* One PMI-1 barrier: barrier_in, then wait for barrier_out. */
static int pmi_barrier(int fd)
{
    static const char req[] = "cmd=barrier_in\n";
    char buf[256];
    size_t n = 0;
    if (write(fd, req, sizeof req - 1) != (ssize_t)(sizeof req - 1))
        return -1;
    while (memchr(buf, '\n', n) == NULL) {
        ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || n + r >= sizeof buf - 1)
            return -1;
        n += r;
    }
    buf[n] = 0;
    return strncmp(buf, "cmd=barrier_out", 15) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "initfini";
    int iters = argc > 2 ? atoi(argv[2]) : 100, mpi_iters = argc > 3 ? atoi(argv[3]) : 10;
    int rank, size, i;
    double t0 = now(), t1, t2, t3;

    MPI_Init(&argc, &argv);
    t1 = now();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (strcmp(mode, "barrier") == 0) {
        const char *fds = getenv("PMI_FD");
        double pmi = -1, mpi = -1, a;
        MPI_Barrier(MPI_COMM_WORLD);
        if (fds != NULL && iters > 0) {
            int fd = atoi(fds);
            if (pmi_barrier(fd) != 0) {
                fprintf(stderr, "rank %d: PMI barrier on fd %d failed\n", rank, fd);
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
            a = now();
            for (i = 0; i < iters; i++) {
                if (pmi_barrier(fd) != 0) {
                    fprintf(stderr, "rank %d: PMI barrier %d failed\n", rank, i);
                    MPI_Abort(MPI_COMM_WORLD, 3);
                }
            }
            pmi = (now() - a) / iters * 1e6;
        }
        if (mpi_iters > 0) {
            MPI_Barrier(MPI_COMM_WORLD);
            a = now();
            for (i = 0; i < mpi_iters; i++)
                MPI_Barrier(MPI_COMM_WORLD);
            mpi = (now() - a) / mpi_iters * 1e6;
        }
        if (rank == 0)
            printf("gwbench pmi_barrier_us %.2f mpi_barrier_us %.2f size %d pmi_fd %s\n", pmi, mpi, size, fds ? fds : "none");
    }
    t2 = now();
    MPI_Finalize();
    t3 = now();
    printf("gwbench rank %d init_ms %.3f finalize_ms %.3f\n", rank, (t1 - t0) * 1e3, (t3 - t2) * 1e3);
    return 0;
}
`

// buildPMIBench compiles pmibench with mpicc.mpich into the scratch dir.
func (b *bench) buildPMIBench(ctx context.Context) (string, error) {
	if b.mpiBin != "" {
		return b.mpiBin, nil
	}
	if !have(mpiccBin) {
		return "", fmt.Errorf("%s not installed (Debian: mpich, libmpich-dev)", mpiccBin)
	}
	src := filepath.Join(b.dir, "pmibench.c")
	bin := filepath.Join(b.dir, "pmibench")
	if err := os.WriteFile(src, []byte(pmibenchSrc), 0o644); err != nil {
		return "", err
	}
	if out, err := exec.CommandContext(ctx, mpiccBin, "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s: %w\n%s", mpiccBin, err, out)
	}
	b.mpiBin = bin
	return bin, nil
}

// mpichEnv is what MPICH ranks need across namespace hosts
// (cmd/launcher/e2e/nettest found it): UCX over TCP on the data NIC, shared
// memory within a host.
var mpichEnv = []string{"UCX_TLS=tcp,self,sm", "UCX_NET_DEVICES=enp1s0f0", "UCX_WARN_UNUSED_ENV_VARS=n"}

// pmiRun is what one pmibench run printed.
type pmiRun struct {
	pmiUS, mpiUS float64 // rank 0's mean barrier latencies; -1 when not run
	initFini     float64 // max over ranks of MPI_Init + MPI_Finalize, ms
	ranks        int     // ranks that reported
}

func parsePMIRun(out string, size int) (pmiRun, error) {
	r := pmiRun{pmiUS: -1, mpiUS: -1}
	for line := range strings.Lines(out) {
		i := strings.Index(line, "gwbench ")
		if i < 0 {
			continue
		}
		f := strings.Fields(line[i:])
		switch {
		case len(f) >= 5 && f[1] == "pmi_barrier_us":
			r.pmiUS, _ = strconv.ParseFloat(f[2], 64)
			r.mpiUS, _ = strconv.ParseFloat(f[4], 64)
		case len(f) >= 7 && f[1] == "rank" && f[3] == "init_ms":
			a, _ := strconv.ParseFloat(f[4], 64)
			c, _ := strconv.ParseFloat(f[6], 64)
			r.initFini = max(r.initFini, a+c)
			r.ranks++
		}
	}
	if r.ranks != size {
		return r, fmt.Errorf("%d of %d ranks reported", r.ranks, size)
	}
	return r, nil
}

// pmi is scenario 3: PMI barrier latency and MPI_Init+MPI_Finalize time of
// an MPICH program, gangway (the agents serve PMI) against Hydra.
func (b *bench) pmi(ctx context.Context) error {
	bin, err := b.buildPMIBench(ctx)
	if err != nil {
		return err
	}
	if !b.peer(hydraBin) {
		return errors.New("mpiexec.hydra not installed")
	}
	e := b.net
	sizes := []int{16, 64}
	if b.o.quick {
		sizes = []int{16}
	}
	const iters, mpiIters = "200", "10"
	const timeout = 3 * time.Minute
	for _, np := range sizes {
		hosts := min(np, e.jobHosts())
		name := fmt.Sprintf("MPICH, %d ranks on %d hosts", np, hosts)
		jb := jobSpec{Hosts: hosts, PerHost: np / hosts, Argv: []string{bin, "barrier", iters, mpiIters}, Env: mpichEnv}
		ji := jobSpec{Hosts: hosts, PerHost: np / hosts, Argv: []string{bin, "initfini"}, Env: mpichEnv}
		hb, err := e.hydra(jb)
		if err != nil {
			return err
		}
		hi, err := e.hydra(ji)
		if err != nil {
			return err
		}
		b.progress("pmi: %s", name)

		// The barrier program: the PMI barrier is the sample, the
		// MPI_Barrier of the same run goes to its own row.
		mpiMetric := "MPI_Barrier (" + mpiIters + " after the PMI barriers; UCX tcp, no launcher involved)"
		mpiGw := &Result{Scenario: "pmi", Case: name, Metric: mpiMetric, Unit: "us", Launcher: lGangway, Kind: Ours}
		mpiHy := &Result{Scenario: "pmi", Case: name, Metric: mpiMetric, Unit: "us", Launcher: lHydra, Kind: Peer}
		pmiVal := func(o outcome) (float64, error) {
			pr, err := parsePMIRun(o.Stdout, np)
			if err == nil && pr.pmiUS < 0 {
				err = errors.New("no PMI_FD in the ranks' environment: cannot time PMI barriers")
			}
			return pr.pmiUS, err
		}
		mpiAfter := func(r *Result) func(o outcome) {
			return func(o outcome) {
				if pr, err := parsePMIRun(o.Stdout, np); err == nil && pr.mpiUS >= 0 {
					r.Values = append(r.Values, pr.mpiUS)
				}
			}
		}
		b.interleave(ctx, caseSpec{scenario: "pmi", name: name, metric: "empty PMI-1 barrier (mean of " + iters + " after MPI_Init, rank 0)", unit: "us"}, []contender{
			{name: lGangway, kind: Ours, argv: e.gangway(jb), capture: true, value: pmiVal, after: mpiAfter(mpiGw), timeout: timeout},
			{name: lHydra, kind: Peer, argv: hb, capture: true, value: pmiVal, after: mpiAfter(mpiHy), timeout: timeout},
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}

		// The init-only program: MPI_Init+MPI_Finalize inside the ranks
		// (the sample) and the launcher's wall time.
		wallMetric := "wall of the init+finalize program"
		wallGw := &Result{Scenario: "pmi", Case: name, Metric: wallMetric, Unit: "ms", Launcher: lGangway, Kind: Ours}
		wallHy := &Result{Scenario: "pmi", Case: name, Metric: wallMetric, Unit: "ms", Launcher: lHydra, Kind: Peer}
		initVal := func(o outcome) (float64, error) {
			pr, err := parsePMIRun(o.Stdout, np)
			return pr.initFini, err
		}
		wallAfter := func(r *Result) func(o outcome) {
			return func(o outcome) { r.Values = append(r.Values, ms(o.Took)) }
		}
		b.interleave(ctx, caseSpec{scenario: "pmi", name: name, metric: "MPI_Init+MPI_Finalize (max over ranks)", unit: "ms"}, []contender{
			{name: lGangway, kind: Ours, argv: e.gangway(ji), capture: true, value: initVal, after: wallAfter(wallGw), timeout: timeout},
			{name: lHydra, kind: Peer, argv: hi, capture: true, value: initVal, after: wallAfter(wallHy), timeout: timeout},
		})
		b.add(mpiGw)
		b.add(mpiHy)
		b.add(wallGw)
		b.add(wallHy)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}
