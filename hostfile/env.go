package hostfile

import "fmt"

// FromSlurm builds hosts from a Slurm allocation. getenv is usually
// os.Getenv. ok is false, with no error, when neither SLURM_JOB_NODELIST nor
// SLURM_NODELIST is set. Slots come from SLURM_TASKS_PER_NODE, else
// SLURM_JOB_CPUS_PER_NODE, else 1 per node; a count list whose length
// differs from the node count is an error. Errors name the variable.
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
	for _, countVar := range []string{"SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE"} {
		v := getenv(countVar)
		if v == "" {
			continue
		}
		if counts, err = ParseTasksPerNode(v); err != nil {
			return nil, true, fmt.Errorf("%s: %w", countVar, err)
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
