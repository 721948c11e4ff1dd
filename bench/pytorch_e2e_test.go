package bench

import (
	"bufio"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// TestPyTorchSyntheticEndToEnd runs examples/pytorch/synthetic_benchmark.py
// as two Gloo ranks on loopback and checks that bench's per-rank total
// agrees with the all-reduced total the script prints on rank 0.
func TestPyTorchSyntheticEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the PyTorch run")
	}
	const python = "/usr/bin/python3"
	if err := exec.CommandContext(t.Context(), python, "-c", "import torch.distributed").Run(); err != nil {
		t.Skipf("%s cannot import torch.distributed: %v", python, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	c, err := NewCollector(DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	wait := runCollector(t, t.Context(), c)
	const ranks = 2
	var wg sync.WaitGroup
	errs := make([]error, ranks)
	for r := range ranks {
		cmd := exec.CommandContext(t.Context(), python, "../examples/pytorch/synthetic_benchmark.py",
			"--num-iters", "4", "--num-batches-per-iter", "2", "--num-warmup-batches", "2", "--batch-size", "16", "--no-cuda")
		cmd.Env = append(os.Environ(), fmt.Sprintf("RANK=%d", r), fmt.Sprintf("LOCAL_RANK=%d", r),
			fmt.Sprintf("WORLD_SIZE=%d", ranks), "MASTER_ADDR=127.0.0.1", fmt.Sprintf("MASTER_PORT=%d", port))
		cmd.Stderr = os.Stderr
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				c.Observe(r, "localhost", time.Now(), sc.Bytes())
			}
			errs[r] = cmd.Wait()
		})
	}
	wg.Wait()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	rep := c.Report(Meta{Ranks: ranks})
	per := findMetricMust(t, rep, MetricHorovod.Name)
	printed := findMetricMust(t, rep, MetricHorovodTotal.Name)
	if per.RanksReporting != ranks || per.Ranks[0].N != 4 || per.Ranks[1].N != 4 || per.Ranks[0].Final == nil {
		t.Fatalf("per-rank metric: %s, ranks %+v", per.Coverage, per.Ranks)
	}
	// Values are printed with one decimal: each rank's mean and the printed
	// total are off by at most 0.05 each.
	if math.Abs(per.Value-printed.Value) > 0.05*(ranks+1)+1e-6 {
		t.Errorf("bench total %.2f vs script's all-reduced total %.2f", per.Value, printed.Value)
	}
}
