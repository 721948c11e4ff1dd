// Package launcher is the launcher's modes and its entry, Main, which
// cmd/launcher calls with what it wired (Deps): running a job (the
// engine), --inspect (inspect.go), --dry-run (dryrun.go), --analyze
// (analyze.go), --mpi=openmpi (openmpi.go, Open MPI's mpirun with the
// agents as its ssh transport) and --rsh (rsh.go, that transport).
//
// The rooms below it, which it alone may import all of (each one's doc
// says what it owns; .ci/check-imports.sh checks the directions):
//
//	plan       the vocabulary: ranks, placement, rank sets, GPU filters, tags
//	transport  how hosts are reached: Dialer, the kinds, New (imports plan)
//	cli        the command line, parsed into Config (plan, transport)
//	diagnose   why a launch ended, failures, stacks (plan, cli)
//	rankenv    the rank-environment pipeline (plan, cli)
//	engine     the job: dial, prepare, run, close (all of the above)
//
// None of them imports the agent's packages but agent/wire; the
// in-process agent reaches them through Deps.NewLocal.
package launcher
