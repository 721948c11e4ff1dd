// Package cli is the launcher's command line: the flags as mpirun,
// Hydra, torchrun, horovodrun and DeepSpeed users type them (flags.go,
// compat.go, compatmap.go; their options gangway does not take as flags
// of its own are accepted or refused by name in foreign.go), where the hosts come from when none are given (resolve.go:
// mpi-operator, Slurm, PBS), the environment files and -x, the checks of
// paths and --metric made before any host is dialled, shell completion
// and the --help text (usage.go), all parsed into one validated Config.
//
// It imports the vocabulary (launcher/plan) and the transports' Options
// and kinds (launcher/transport); no other launcher package: the engine,
// the diagnostics and the modes read the Config, never the flags. It
// does not log and starts nothing.
package cli
