package cli

import (
	"fmt"
	"strings"

	"github.com/gangway-hpc/gangway/launcher/transport"
)

// notForOpenMPI lists the options given that Open MPI's mpirun does not
// get from gangway (--mpi=openmpi refuses them).
func (c *Config) notForOpenMPI() []string {
	p, out := c.Place, []string(nil)
	add := func(on bool, flag string) {
		if on {
			out = append(out, flag)
		}
	}
	add(p.PE > 0, "-map-by PE=N")
	add(p.PerSocket > 0, "-map-by ppr:N:socket")
	add(p.RankBy != "", "-rank-by")
	add(c.Out.DisplayMap, "--display-map")
	add(c.Out.MergeStderr, "--merge-stderr-to-stdout")
	// What gangway's own job engine does, which mpirun's job skips.
	add(c.Control.MaxRestarts > 0, "--max-restarts")
	add(p.Spares > 0, "--spares")
	add(c.Health.Command != "", "--health-check")
	add(c.Network.Selftest != SelftestOff, "--selftest")
	add(c.Bench.ReportFile != "", "--report")
	return out
}

// DelegateToOpenMPI turns a job of an Open MPI program under --mpi auto
// into what --mpi=openmpi runs (Open MPI's mpirun over the agents), or
// returns a usage error naming the options that stand in the way (those
// --mpi=openmpi refuses, and the srun transport).
func (c *Config) DelegateToOpenMPI() error {
	in := c.notForOpenMPI()
	if c.Transport.Kind == transport.Slurm {
		in = append(in, "--transport slurm (the default inside a Slurm allocation; mpirun starts its daemons over SSH)")
	}
	if len(in) > 0 {
		return fmt.Errorf("%w: Open MPI's mpirun, which runs Open MPI programs, gets no %s from gangway", ErrUsage, strings.Join(in, ", "))
	}
	c.Mode = ModeOpenMPI
	return nil
}
