package hostfile

import (
	"fmt"
	"slices"
)

// FromSlurm builds hosts from a Slurm allocation. getenv is usually
// os.Getenv. ok is false, with no error, when neither SLURM_JOB_NODELIST nor
// SLURM_NODELIST is set. Slots come from SLURM_TASKS_PER_NODE, else
// SLURM_JOB_CPUS_PER_NODE, else 1 per node; a count list whose length
// differs from the node count is an error. Errors name the variable.
//
// Inside an srun step (SLURM_STEP_NUM_TASKS is set: `srun --pty bash`,
// `srun --ntasks=1 launcher ...`) srun sets SLURM_TASKS_PER_NODE to the
// step's layout, one task on one node, not the job's: the slots then come
// from the job's --ntasks-per-node (SLURM_NTASKS_PER_NODE, the same count
// on every node), else 1 per node (-ppn N asks for more). Not the job's
// CPUs: on whole nodes that would be a rank per core where the job asked
// for a task per node.
func FromSlurm(getenv func(string) string) (hosts []Host, ok bool, err error) {
	listVar := "SLURM_JOB_NODELIST"
	list := getenv(listVar)
	if list == "" {
		listVar = "SLURM_NODELIST"
		list = getenv(listVar)
	}
	if list == "" {
		return nil, false, nil
	}
	nodes, err := ExpandNodeList(list)
	if err != nil {
		return nil, true, fmt.Errorf("%s: %w", listVar, err)
	}
	counts := make([]int, len(nodes))
	for i := range counts {
		counts[i] = 1
	}
	countVars := []string{"SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE"}
	if getenv("SLURM_STEP_NUM_TASKS") != "" {
		countVars = []string{"SLURM_NTASKS_PER_NODE"}
	}
	for _, countVar := range countVars {
		v := getenv(countVar)
		if v == "" {
			continue
		}
		if counts, err = ParseTasksPerNode(v); err != nil {
			return nil, true, fmt.Errorf("%s: %w", countVar, err)
		}
		if countVar == "SLURM_NTASKS_PER_NODE" && len(counts) == 1 {
			counts = slices.Repeat(counts, len(nodes))
		}
		if len(counts) != len(nodes) {
			return nil, true, fmt.Errorf("%s %q gives %d counts for the %d nodes of %s %q",
				countVar, v, len(counts), len(nodes), listVar, list)
		}
		break
	}
	var m merger
	for i, name := range nodes {
		if err := m.add(Host{Name: name, Slots: counts[i]}); err != nil {
			return nil, true, fmt.Errorf("%s: %w", listVar, err)
		}
	}
	return m.hosts, true, nil
}

// FromPBS reads the node file named by PBS_NODEFILE (one line per slot, the
// host repeated; repeats merge). getenv is usually os.Getenv. ok is false,
// with no error, when PBS_NODEFILE is unset.
func FromPBS(getenv func(string) string) (hosts []Host, ok bool, err error) {
	path := getenv("PBS_NODEFILE")
	if path == "" {
		return nil, false, nil
	}
	hosts, err = ParseFile(path)
	if err != nil {
		return nil, true, fmt.Errorf("PBS_NODEFILE: %w", err)
	}
	return hosts, true, nil
}

// MPIOperatorVars are the variables naming the hostfile that Kubeflow's
// mpi-operator (MPIJob v2beta1) writes at /etc/mpi/hostfile, in the order
// FromMPIOperator reads them: Open MPI 4's, Open MPI 5's (PRTE), Intel
// MPI's and MPICH's (Hydra). The operator sets the one of its
// mpiImplementation; Open MPI's file has "host slots=N" lines, the
// others "host:N".
var MPIOperatorVars = []string{
	"OMPI_MCA_orte_default_hostfile",
	"PRTE_MCA_prte_default_hostfile",
	"I_MPI_HYDRA_HOST_FILE",
	"HYDRA_HOST_FILE",
}

// FromMPIOperator reads the hostfile named by the first of
// MPIOperatorVars that is set. getenv is usually os.Getenv. ok is false,
// with no error, when none is set; name is the variable read and path
// its value. Errors name the variable.
func FromMPIOperator(getenv func(string) string) (hosts []Host, name, path string, ok bool, err error) {
	for _, v := range MPIOperatorVars {
		if path = getenv(v); path != "" {
			name = v
			break
		}
	}
	if path == "" {
		return nil, "", "", false, nil
	}
	hosts, err = ParseFile(path)
	if err != nil {
		return nil, name, path, true, fmt.Errorf("%s: %w", name, err)
	}
	return hosts, name, path, true, nil
}
