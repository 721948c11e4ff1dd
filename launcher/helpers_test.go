package launcher

import (
	"os"
	"path/filepath"
	"testing"
)

// operatorEnv is the environment of an mpi-operator launcher pod whose
// hostfile (OMPI_MCA_orte_default_hostfile) holds lines.
func operatorEnv(t *testing.T, lines string) map[string]string {
	t.Helper()
	hf := filepath.Join(t.TempDir(), "hostfile")
	if err := os.WriteFile(hf, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"K_MPI_JOB_ROLE": "launcher", "OMPI_MCA_orte_default_hostfile": hf}
}
