package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// treerankSrc is the rank of the scale and treepath scenarios: a PMI-1
// client on PMI_FD (cmd=init first, as MPICH's simple PMI does), one
// barrier that waits for every rank to start, then ITERS barriers each
// timed on its own (barrier_in sent to barrier_out read). It prints one
// line: its RANK, WORLD_SIZE and PMI_RANK as the launcher set them, when
// it started (CLOCK_REALTIME, ns) and the median of its barriers (ns).
const treerankSrc = `/* treerank: written by gwbench (cmd/gwbench/treerank.go). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long ns(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* req sends msg and reads one reply line, which must start with want. */
static int req(int fd, const char *msg, const char *want)
{
    char buf[1024];
    size_t n = 0, len = strlen(msg);
    if (write(fd, msg, len) != (ssize_t)len) {
        fprintf(stderr, "treerank: %s: write: %s\n", want, strerror(errno));
        return -1;
    }
    while (n == 0 || buf[n - 1] != '\n') {
        ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || n + r >= sizeof buf - 1) {
            fprintf(stderr, "treerank: %s: %s after %zu bytes\n", want, r == 0 ? "end of file" : r < 0 ? strerror(errno) : "reply too long", n);
            return -1;
        }
        n += r;
    }
    buf[n] = 0;
    if (strncmp(buf, want, strlen(want)) != 0 || strstr(buf, "rc=-") != NULL) {
        fprintf(stderr, "treerank: %s: got %s", want, buf);
        return -1;
    }
    return 0;
}

static int cmp(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    long long start = ns(CLOCK_REALTIME), *t;
    int iters = argc > 1 ? atoi(argv[1]) : 10, fd, i;
    const char *rank = getenv("RANK"), *size = getenv("WORLD_SIZE"), *prank = getenv("PMI_RANK"), *fds = getenv("PMI_FD");

    if (rank == NULL || size == NULL || fds == NULL) {
        fprintf(stderr, "treerank: RANK, WORLD_SIZE or PMI_FD not set\n");
        return 2;
    }
    fd = atoi(fds);
    if (req(fd, "cmd=init pmi_version=1 pmi_subversion=1\n", "cmd=response_to_init") != 0 ||
        req(fd, "cmd=barrier_in\n", "cmd=barrier_out") != 0)
        return 3;
    t = calloc(iters > 0 ? iters : 1, sizeof *t);
    for (i = 0; i < iters; i++) {
        long long a = ns(CLOCK_MONOTONIC);
        if (req(fd, "cmd=barrier_in\n", "cmd=barrier_out") != 0)
            return 3;
        t[i] = ns(CLOCK_MONOTONIC) - a;
    }
    qsort(t, iters, sizeof *t, cmp);
    req(fd, "cmd=finalize\n", "cmd=finalize_ack");
    printf("gwbench treerank %s %s %s %lld %lld\n", rank, size, prank ? prank : "-", start, iters > 0 ? t[iters / 2] : -1LL);
    return 0;
}
`

// buildTreeRank compiles treerank with cc into the scratch directory.
func (b *bench) buildTreeRank(ctx context.Context) (string, error) {
	if b.treeRank != "" {
		return b.treeRank, nil
	}
	src := filepath.Join(b.dir, "treerank.c")
	bin := filepath.Join(b.dir, "treerank")
	if err := os.WriteFile(src, []byte(treerankSrc), 0o644); err != nil {
		return "", err
	}
	if out, err := exec.CommandContext(ctx, "cc", "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("cc treerank.c: %w\n%s", err, out)
	}
	b.treeRank = bin
	return bin, nil
}

// treeRun is what the ranks of one treerank job printed.
type treeRun struct {
	ranks      int   // lines read, one per rank
	firstStart int64 // earliest and latest start, CLOCK_REALTIME ns
	lastStart  int64
	// Barrier medians over ranks (ns): each rank's median of its
	// barriers; the largest is about the barrier's period (the last rank
	// in waits least), the median is typical.
	barrierMax, barrierMed int64
}

// parseTreeRun reads the treerank lines of a job of size ranks: every
// rank 0..size-1 exactly once, each with WORLD_SIZE = size and PMI_RANK
// = RANK, or an error that says what is wrong.
func parseTreeRun(out string, size int) (treeRun, error) {
	var r treeRun
	seen := make([]bool, size)
	var meds []int64
	var bad []string
	for line := range strings.Lines(out) {
		i := strings.Index(line, "gwbench treerank ")
		if i < 0 {
			continue
		}
		f := strings.Fields(line[i+len("gwbench treerank "):])
		if len(f) != 5 {
			bad = append(bad, fmt.Sprintf("malformed line %q", strings.TrimSpace(line)))
			continue
		}
		rank, err1 := strconv.Atoi(f[0])
		ws, err2 := strconv.Atoi(f[1])
		start, err3 := strconv.ParseInt(f[3], 10, 64)
		med, err4 := strconv.ParseInt(f[4], 10, 64)
		switch {
		case err1 != nil || err2 != nil || err3 != nil || err4 != nil:
			bad = append(bad, fmt.Sprintf("malformed line %q", strings.TrimSpace(line)))
			continue
		case rank < 0 || rank >= size:
			bad = append(bad, fmt.Sprintf("RANK=%d out of 0..%d", rank, size-1))
			continue
		case seen[rank]:
			bad = append(bad, fmt.Sprintf("rank %d twice", rank))
			continue
		case ws != size:
			bad = append(bad, fmt.Sprintf("rank %d: WORLD_SIZE=%d, want %d", rank, ws, size))
		case f[2] != f[0]:
			bad = append(bad, fmt.Sprintf("rank %d: PMI_RANK=%s", rank, f[2]))
		}
		seen[rank] = true
		r.ranks++
		if r.firstStart == 0 || start < r.firstStart {
			r.firstStart = start
		}
		r.lastStart = max(r.lastStart, start)
		meds = append(meds, med)
	}
	if missing := size - r.ranks; missing > 0 {
		first := slices.Index(seen, false)
		bad = append(bad, fmt.Sprintf("%d of %d ranks did not report (first: rank %d)", missing, size, first))
	}
	if len(meds) > 0 {
		slices.Sort(meds)
		r.barrierMax, r.barrierMed = meds[len(meds)-1], meds[len(meds)/2]
	}
	if len(bad) > 0 {
		if len(bad) > 3 {
			bad = append(bad[:3], fmt.Sprintf("and %d more", len(bad)-3))
		}
		return r, fmt.Errorf("ranks: %s", strings.Join(bad, "; "))
	}
	return r, nil
}
