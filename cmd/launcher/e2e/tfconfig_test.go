package e2e_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

// tfWorker is a rank that reads TF_CONFIG as TensorFlow's
// MultiWorkerMirroredStrategy does (TFConfigClusterResolver: the cluster's
// worker list, this task's type and index) and listens where its entry
// says, as a TensorFlow worker's gRPC server would.
const tfWorker = `
import json, os, socket
tf = json.loads(os.environ["TF_CONFIG"])
workers = tf["cluster"]["worker"]
i = tf["task"]["index"]
assert tf["task"]["type"] == "worker", tf
host, port = workers[i].rsplit(":", 1)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((host, int(port)))
s.listen()
print("worker %d of %d listening on %s rank %s" % (i, len(workers), workers[i], os.environ["RANK"]))
`

// TestTFConfig: with --tf-config, 2 loopback agents x 8 ranks each find
// themselves in TF_CONFIG's worker list at their rank's index, on their
// own host's address, and can listen there.
func TestTFConfig(t *testing.T) {
	t.Parallel()
	const np = 2 * perHost
	c := e2e.StartLocal(t, 2)
	stdout, stderr, code := c.RunLauncher(t, "-np", strconv.Itoa(np), "-H", c.HostList(perHost), "--tf-config", "24222", "python3", "-c", tfWorker)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for r := range np {
		h := c.Hosts[r/perHost]
		want := fmt.Sprintf("worker %d of %d listening on %s:%d rank %d\n", r, np, h.Addr, 24222+r%perHost, r)
		if !strings.Contains(stdout, want) {
			t.Errorf("no %q in:\n%s", want, stdout)
		}
	}
}
