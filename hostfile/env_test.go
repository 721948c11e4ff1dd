package hostfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func envFunc(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}

func TestFromSlurm(t *testing.T) {
	tests := []struct {
		name   string
		env    map[string]string
		want   []Host
		wantOK bool
		err    string
	}{
		{"not slurm", map[string]string{"SLURM_TASKS_PER_NODE": "8"}, nil, false, ""},
		{"tasks per node", map[string]string{
			"SLURM_JOB_NODELIST":   "dgx[01-02],gpu1",
			"SLURM_TASKS_PER_NODE": "8(x2),4",
		}, []Host{{Name: "dgx01", Slots: 8}, {Name: "dgx02", Slots: 8}, {Name: "gpu1", Slots: 4}}, true, ""},
		{"old variable name", map[string]string{
			"SLURM_NODELIST":       "n[1-2]",
			"SLURM_TASKS_PER_NODE": "2(x2)",
		}, []Host{{Name: "n1", Slots: 2}, {Name: "n2", Slots: 2}}, true, ""},
		{"job nodelist wins", map[string]string{
			"SLURM_JOB_NODELIST": "a",
			"SLURM_NODELIST":     "b",
		}, []Host{{Name: "a", Slots: 1}}, true, ""},
		{"cpus per node", map[string]string{
			"SLURM_JOB_NODELIST":      "n[1-2]",
			"SLURM_JOB_CPUS_PER_NODE": "16,32",
		}, []Host{{Name: "n1", Slots: 16}, {Name: "n2", Slots: 32}}, true, ""},
		{"tasks win over cpus", map[string]string{
			"SLURM_JOB_NODELIST":      "n[1-2]",
			"SLURM_TASKS_PER_NODE":    "1(x2)",
			"SLURM_JOB_CPUS_PER_NODE": "16,32",
		}, []Host{{Name: "n1", Slots: 1}, {Name: "n2", Slots: 1}}, true, ""},
		{"no counts", map[string]string{"SLURM_JOB_NODELIST": "n[1-3]"},
			[]Host{{Name: "n1", Slots: 1}, {Name: "n2", Slots: 1}, {Name: "n3", Slots: 1}}, true, ""},
		{"repeated node merges", map[string]string{
			"SLURM_JOB_NODELIST":   "a,b,a",
			"SLURM_TASKS_PER_NODE": "2,1,3",
		}, []Host{{Name: "a", Slots: 5}, {Name: "b", Slots: 1}}, true, ""},

		// Inside an srun step of one task (srun --pty bash, srun
		// --ntasks=1), as Slurm 22.05 sets it: SLURM_TASKS_PER_NODE is
		// the step's, the job's --ntasks-per-node stays.
		{"in a step: the job's tasks per node", map[string]string{
			"SLURM_JOB_NODELIST":      "dgx[01-02]",
			"SLURM_NODELIST":          "dgx[01-02]",
			"SLURM_STEP_NODELIST":     "dgx01",
			"SLURM_STEP_NUM_TASKS":    "1",
			"SLURM_TASKS_PER_NODE":    "1",
			"SLURM_NTASKS_PER_NODE":   "8",
			"SLURM_JOB_CPUS_PER_NODE": "128(x2)",
		}, []Host{{Name: "dgx01", Slots: 8}, {Name: "dgx02", Slots: 8}}, true, ""},
		{"in a step of a job without --ntasks-per-node: one a node, not its CPUs", map[string]string{
			"SLURM_JOB_NODELIST":      "n[1-2]",
			"SLURM_STEP_NUM_TASKS":    "1",
			"SLURM_TASKS_PER_NODE":    "1",
			"SLURM_JOB_CPUS_PER_NODE": "128(x2)",
		}, []Host{{Name: "n1", Slots: 1}, {Name: "n2", Slots: 1}}, true, ""},
		{"in a step: per-node counts that do not fit", map[string]string{
			"SLURM_JOB_NODELIST":    "n[1-3]",
			"SLURM_STEP_NUM_TASKS":  "1",
			"SLURM_NTASKS_PER_NODE": "8,8",
		}, nil, true, `SLURM_NTASKS_PER_NODE "8,8" gives 2 counts for the 3 nodes of SLURM_JOB_NODELIST "n[1-3]"`},
		{"count mismatch", map[string]string{
			"SLURM_JOB_NODELIST":   "n[1-3]",
			"SLURM_TASKS_PER_NODE": "8(x2)",
		}, nil, true, `SLURM_TASKS_PER_NODE "8(x2)" gives 2 counts for the 3 nodes of SLURM_JOB_NODELIST "n[1-3]"`},
		{"cpus mismatch", map[string]string{
			"SLURM_NODELIST":          "n1",
			"SLURM_JOB_CPUS_PER_NODE": "4,4",
		}, nil, true, `SLURM_JOB_CPUS_PER_NODE "4,4" gives 2 counts for the 1 nodes of SLURM_NODELIST "n1"`},
		{"bad node list", map[string]string{"SLURM_JOB_NODELIST": "n[1-"},
			nil, true, `SLURM_JOB_NODELIST: node list "n[1-": missing "]"`},
		{"bad tasks", map[string]string{
			"SLURM_JOB_NODELIST":   "n1",
			"SLURM_TASKS_PER_NODE": "x",
		}, nil, true, `SLURM_TASKS_PER_NODE: tasks per node "x": bad count "x"`},
		{"slot overflow", map[string]string{
			"SLURM_JOB_NODELIST":   "a,a",
			"SLURM_TASKS_PER_NODE": "1048576(x2)",
		}, nil, true, `SLURM_JOB_NODELIST: host "a": more than 1048576 slots in all`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := FromSlurm(envFunc(tt.env))
			if ok != tt.wantOK {
				t.Errorf("ok = %v, want %v", ok, tt.wantOK)
			}
			if wantErr(t, err, tt.err) {
				return
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("FromSlurm\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestFromSlurmTooManyHosts(t *testing.T) {
	_, ok, err := FromSlurm(envFunc(map[string]string{"SLURM_JOB_NODELIST": "n[1-999999999]"}))
	if !ok || !errors.Is(err, ErrTooManyHosts) {
		t.Errorf("FromSlurm = ok %v, %v; want ok and ErrTooManyHosts", ok, err)
	}
}

func TestFromPBS(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "nodes")
	if err := os.WriteFile(good, []byte("cn01\ncn01\ncn02\ncn01\ncn02\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("cn01\ncn 02\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	hosts, ok, err := FromPBS(envFunc(nil))
	if ok || err != nil || hosts != nil {
		t.Errorf("without PBS_NODEFILE: %v, %v, %v; want nil, false, nil", hosts, ok, err)
	}

	hosts, ok, err = FromPBS(envFunc(map[string]string{"PBS_NODEFILE": good}))
	if !ok || err != nil {
		t.Fatalf("FromPBS = ok %v, %v", ok, err)
	}
	if want := []Host{{Name: "cn01", Slots: 3}, {Name: "cn02", Slots: 2}}; !reflect.DeepEqual(hosts, want) {
		t.Errorf("FromPBS = %+v, want %+v", hosts, want)
	}

	_, ok, err = FromPBS(envFunc(map[string]string{"PBS_NODEFILE": bad}))
	if !ok {
		t.Error("ok = false for a set PBS_NODEFILE")
	}
	wantErr(t, err, "PBS_NODEFILE: "+bad+`:2: bad field "02": want key=value`)
	var pe *ParseError
	if !errors.As(err, &pe) || pe.File != bad || pe.Line != 2 {
		t.Errorf("error %v: want *ParseError at %s:2", err, bad)
	}

	_, _, err = FromPBS(envFunc(map[string]string{"PBS_NODEFILE": empty}))
	wantErr(t, err, "PBS_NODEFILE: "+empty+": no hosts")
	if !errors.Is(err, ErrNoHosts) {
		t.Errorf("empty node file: %v, want ErrNoHosts", err)
	}

	_, ok, err = FromPBS(envFunc(map[string]string{"PBS_NODEFILE": filepath.Join(dir, "gone")}))
	if !ok || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing node file: ok %v, %v; want ok and fs.ErrNotExist", ok, err)
	}
}

func TestFromMPIOperator(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o444); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The operator's newConfigMap, byte for byte: Open MPI lines, and the
	// host:slots lines of Intel MPI and MPICH.
	ompi := write("ompi", "pi-launcher.pi.default.svc slots=2\npi-worker-0.pi.default.svc slots=2\npi-worker-1.pi.default.svc slots=2\n")
	hydra := write("hydra", "pi-worker-0.pi.default.svc:4\npi-worker-1.pi.default.svc:4\n")
	bad := write("bad", "pi-worker-0.pi.default.svc slots=two\n")
	ompiHosts := []Host{{Name: "pi-launcher.pi.default.svc", Slots: 2}, {Name: "pi-worker-0.pi.default.svc", Slots: 2}, {Name: "pi-worker-1.pi.default.svc", Slots: 2}}
	hydraHosts := []Host{{Name: "pi-worker-0.pi.default.svc", Slots: 4}, {Name: "pi-worker-1.pi.default.svc", Slots: 4}}
	tests := []struct {
		name    string
		env     map[string]string
		want    []Host
		wantVar string
		wantOK  bool
		err     string
	}{
		{"not the operator", map[string]string{"K_MPI_JOB_ROLE": "launcher", "OMPI_MCA_orte_set_default_slots": "2"}, nil, "", false, ""},
		{"open mpi 4", map[string]string{"OMPI_MCA_orte_default_hostfile": ompi}, ompiHosts, "OMPI_MCA_orte_default_hostfile", true, ""},
		{"open mpi 5", map[string]string{"PRTE_MCA_prte_default_hostfile": ompi}, ompiHosts, "PRTE_MCA_prte_default_hostfile", true, ""},
		{"intel mpi", map[string]string{"I_MPI_HYDRA_HOST_FILE": hydra, "I_MPI_PERHOST": "4"}, hydraHosts, "I_MPI_HYDRA_HOST_FILE", true, ""},
		{"mpich", map[string]string{"HYDRA_HOST_FILE": hydra}, hydraHosts, "HYDRA_HOST_FILE", true, ""},
		{"open mpi 4 first", map[string]string{"OMPI_MCA_orte_default_hostfile": ompi, "HYDRA_HOST_FILE": hydra}, ompiHosts, "OMPI_MCA_orte_default_hostfile", true, ""},
		{"bad slots", map[string]string{"HYDRA_HOST_FILE": bad}, nil, "HYDRA_HOST_FILE", true, "HYDRA_HOST_FILE: " + bad + `:1: bad slots "two"`},
		{"missing file", map[string]string{"OMPI_MCA_orte_default_hostfile": filepath.Join(dir, "gone")}, nil, "OMPI_MCA_orte_default_hostfile", true,
			"OMPI_MCA_orte_default_hostfile: cannot open hostfile: open " + filepath.Join(dir, "gone") + ": no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hosts, name, path, ok, err := FromMPIOperator(envFunc(tt.env))
			if ok != tt.wantOK || name != tt.wantVar || (ok && path != tt.env[tt.wantVar]) {
				t.Errorf("FromMPIOperator = ok %v, variable %q, path %q; want %v, %q, %q", ok, name, path, tt.wantOK, tt.wantVar, tt.env[tt.wantVar])
			}
			if tt.err != "" {
				wantErr(t, err, tt.err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(hosts, tt.want) {
				t.Errorf("hosts = %+v, want %+v", hosts, tt.want)
			}
		})
	}
}
