package slurmbed_test

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/cmd/internal/slurmbed"
	"github.com/gangway-hpc/gangway/cmd/internal/slurmbed/slurmtest"
)

// TestBed builds a two-node cluster, runs steps on it, and checks that
// Close leaves nothing: no namespace, no directory, the machine's
// /etc/hosts untouched, and a srun left running is found and killed.
func TestBed(t *testing.T) {
	slurmtest.Require(t)
	hostsBefore, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	b, err := slurmbed.New(t.Context(), slurmbed.Options{Prefix: "gws1", Subnet: 197, Nodes: 2, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			if err := b.Close(); err != nil {
				t.Error(err)
			}
		}
	})
	nodes := b.Nodes()
	if len(nodes) != 2 || nodes[0].Name != "cn1" || nodes[1].Addr != "198.18.197.3" {
		t.Fatalf("nodes %+v", nodes)
	}

	// On the nodes, node names resolve (the bed's hosts file) and
	// hostname is the node's name; the step sees its allocation.
	// The step's output is its stdout: srun says on its stderr that the
	// job waits while the nodes finish registering ("srun: job 2 queued
	// and waiting for resources").
	step := b.Command(t.Context(), "srun", "-N2", "-n2", "sh", "-c", `echo "$(hostname) $SLURMD_NODENAME $(getent hosts cn2 | cut -d' ' -f1)"`)
	var stepErr bytes.Buffer
	step.Stderr = &stepErr
	out, err := step.Output()
	if err != nil {
		t.Fatalf("srun: %v\n%s%s%s", err, out, stepErr.Bytes(), b.Logs())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	slices.Sort(lines)
	if want := []string{"cn1 cn1 198.18.197.3", "cn2 cn2 198.18.197.3"}; !slices.Equal(lines, want) {
		t.Errorf("srun printed %q, want %q", lines, want)
	}
	if now, _ := os.ReadFile("/etc/hosts"); !bytes.Equal(now, hostsBefore) {
		t.Error("the machine's /etc/hosts changed while the bed ran")
	}

	// A srun left behind (a step that sleeps) is found and killed by Close.
	stray := b.Command(t.Context(), "srun", "-N1", "sleep", "300")
	if err := stray.Start(); err != nil {
		t.Fatal(err)
	}
	waitDone := make(chan error, 1)
	go func() { waitDone <- stray.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := b.Command(t.Context(), "squeue", "-h", "-s", "-o", "%i %j").Output()
		if strings.Contains(string(out), "sleep") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sleep step did not start within 30s%s", b.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	dir := b.Dir()
	err = b.Close()
	closed = true
	if err == nil || !strings.Contains(err.Error(), "processes still using the bed, killed") || !strings.Contains(err.Error(), "(srun)") {
		t.Errorf("Close = %v, want it to name the srun left running", err)
	}
	select {
	case <-waitDone:
	case <-time.After(10 * time.Second):
		t.Error("the stray srun still runs after Close")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("bed directory %s still there: %v", dir, err)
	}
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), "gws1h") {
		t.Errorf("namespaces left:\n%s", out)
	}
	if now, _ := os.ReadFile("/etc/hosts"); !bytes.Equal(now, hostsBefore) {
		t.Error("the machine's /etc/hosts changed")
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
