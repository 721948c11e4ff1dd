package plan

// identityVars are a rank's identity: the variables the launcher computes
// for each rank from its place in the job (and the job's and run's ids),
// which a user's -x never overrides. The launcher owns all of them,
// PMI_RANK and PMI_SIZE included.
var identityVars = map[string]bool{
	"RANK": true, "WORLD_SIZE": true, "LOCAL_RANK": true, "LOCAL_WORLD_SIZE": true,
	"GROUP_RANK": true, "GROUP_WORLD_SIZE": true, "ROLE_RANK": true, "ROLE_WORLD_SIZE": true,
	"OMPI_COMM_WORLD_RANK": true, "OMPI_COMM_WORLD_SIZE": true, "OMPI_COMM_WORLD_LOCAL_RANK": true,
	"OMPI_COMM_WORLD_LOCAL_SIZE": true, "OMPI_COMM_WORLD_NODE_RANK": true,
	"PMI_RANK": true, "PMI_SIZE": true, "MPI_LOCALRANKID": true, "MPI_LOCALNRANKS": true,
	"HOROVOD_RANK": true, "HOROVOD_SIZE": true, "HOROVOD_LOCAL_RANK": true, "HOROVOD_LOCAL_SIZE": true,
	"HOROVOD_CROSS_RANK": true, "HOROVOD_CROSS_SIZE": true, "HOROVOD_HOSTNAME": true,
	"GANGWAY_JOB_ID": true, "GANGWAY_HOST": true,
	"TORCHELASTIC_RUN_ID": true, "TORCHELASTIC_RESTART_COUNT": true, "TORCHELASTIC_MAX_RESTARTS": true,
}

// IsIdentity reports whether name is one of a rank's identity variables,
// which the launcher sets for each rank and -x cannot change.
func IsIdentity(name string) bool { return identityVars[name] }
