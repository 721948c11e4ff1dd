package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/gangway-hpc/gangway/cmd/internal/slurmbed"
)

// The slurm scenario: inside one Slurm allocation of 3 nodes x 8 CPUs on
// a real Slurm 22.05 cluster (cmd/internal/slurmbed), gangway over srun
// (--transport slurm: one srun step starts an agent per node, which start
// the ranks) against Slurm launching the ranks itself (srun --mpi=pmi2):
// the launch of 8 /bin/true per node, and MPICH's PMI barrier.

const (
	slurmNodes   = 3
	slurmPerNode = 8
)

// slurmBed names the scenario's own bed: gws9<N> on 198.18.(199-N).0/24,
// apart from the main bed (gwb<N>, 198.18.(190+N)) and the tests' beds.
func slurmBed() (prefix string, subnet int) {
	n := bedSubnet - 190
	return fmt.Sprintf("gws9%d", n), 199 - n
}

// lSrun is Slurm's own launcher.
const lSrun = "srun --mpi=pmi2"

var grantedRE = regexp.MustCompile(`Granted job allocation (\d+)`)

// slurm builds the bed, makes one allocation, and runs both cases in it.
func (b *bench) slurm(ctx context.Context) error {
	if err := slurmbed.Usable(); err != nil {
		return err
	}
	prefix, subnet := slurmBed()
	t0 := time.Now()
	bed, err := slurmbed.New(ctx, slurmbed.Options{Prefix: prefix, Subnet: subnet, Nodes: slurmNodes, CPUs: slurmPerNode, Logf: b.logf})
	if err != nil {
		return err
	}
	defer func() {
		if err := bed.Close(); err != nil {
			fmt.Fprintln(b.stderr, "gwbench: removing the Slurm bed:", err)
		}
	}()
	b.progress("slurm: %d nodes up in %v", slurmNodes, time.Since(t0).Round(time.Millisecond))
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := bed.Command(actx, "salloc", "-N", fmt.Sprint(slurmNodes), fmt.Sprintf("--ntasks-per-node=%d", slurmPerNode), "--no-shell", "--immediate=30").CombinedOutput()
	m := grantedRE.FindStringSubmatch(string(out))
	if err != nil || m == nil {
		return fmt.Errorf("salloc: %v: %s", err, out)
	}
	job := m[1]
	defer func() { _ = bed.Command(context.WithoutCancel(ctx), "scancel", job).Run() }()
	var nodes []string
	for _, n := range bed.Nodes() {
		nodes = append(nodes, n.Name)
	}
	// What salloc gives the command it runs, so both launchers see the
	// allocation as from inside it.
	alloc := append(bed.Env(), "SLURM_JOB_ID="+job, "SLURM_JOBID="+job,
		"SLURM_JOB_NODELIST="+strings.Join(nodes, ","), "SLURM_NNODES="+fmt.Sprint(slurmNodes),
		fmt.Sprintf("SLURM_TASKS_PER_NODE=%d(x%d)", slurmPerNode, slurmNodes))
	gangway := func(argv ...string) []string {
		return append([]string{b.bins.launcher, "--agent-path", b.bins.agent}, argv...)
	}
	srun := func(argv ...string) []string {
		return append([]string{"srun", "--mpi=pmi2", "-N", fmt.Sprint(slurmNodes), fmt.Sprintf("--ntasks-per-node=%d", slurmPerNode)}, argv...)
	}
	version := "srun (version unknown)"
	if out, err := bed.Command(actx, "srun", "--version").Output(); err == nil {
		version = strings.TrimSpace(string(out))
	}
	b.config = append(b.config, ConfigLine{"slurm", fmt.Sprintf("%s; %d nodes (network namespaces %sh1..%d on 198.18.%d.0/24, slurmd each, controller and munged on %sh0), %d CPUs each as declared, one allocation (salloc -N%d --ntasks-per-node=%d); gangway: --transport slurm (one srun step starts the agents); peer: %s -N%d --ntasks-per-node=%d",
		version, slurmNodes, prefix, slurmNodes, subnet, prefix, slurmPerNode, slurmNodes, slurmPerNode, lSrun, slurmNodes, slurmPerNode)})

	name := fmt.Sprintf("%d nodes x %d /bin/true, in one allocation", slurmNodes, slurmPerNode)
	b.progress("slurm: %s", name)
	b.interleave(ctx, caseSpec{scenario: "slurm", name: name, unit: "ms"}, []contender{
		{name: lGangway, kind: Ours, argv: gangway("/bin/true"), env: alloc, timeout: time.Minute, note: "--transport slurm"},
		{name: lSrun, kind: Peer, argv: srun("/bin/true"), env: alloc, timeout: time.Minute},
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}

	bin, err := b.buildPMIBench(ctx)
	if err != nil {
		return err
	}
	np := slurmNodes * slurmPerNode
	const iters, mpiIters = "200", "10"
	name = fmt.Sprintf("MPICH, %d ranks on %d nodes", np, slurmNodes)
	b.progress("slurm: %s", name)
	env := append(append([]string{}, alloc...), mpichEnv...)
	pmiVal := func(o outcome) (float64, error) {
		pr, err := parsePMIRun(o.Stdout, np)
		if err == nil && pr.pmiUS < 0 {
			err = errors.New("no PMI_FD in the ranks' environment: cannot time PMI barriers")
		}
		return pr.pmiUS, err
	}
	b.interleave(ctx, caseSpec{scenario: "slurm", name: name, metric: "empty PMI-1 barrier (mean of " + iters + " after MPI_Init, rank 0)", unit: "us"}, []contender{
		{name: lGangway, kind: Ours, argv: gangway(bin, "barrier", iters, mpiIters), env: env, capture: true, value: pmiVal, timeout: 3 * time.Minute, note: "--transport slurm; the agents serve PMI"},
		{name: lSrun, kind: Peer, argv: srun(bin, "barrier", iters, mpiIters), env: env, capture: true, value: pmiVal, timeout: 3 * time.Minute, note: "slurmstepd serves PMI (mpi/pmi2, PMI-1 wire)"},
	})
	return ctx.Err()
}
