package nettest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed/roottest"
)

// podScript makes a process look like a Kubeflow mpi-operator pod's main
// container, in its own mount and UTS namespaces (unshare --mount --uts):
// a home of its own (tmpfs on /root), the job's SSH Secret mounted
// read-only at /root/.ssh (the operator's default sshAuthMountPath), a
// generated hosts file over /etc/hosts standing in for the cluster DNS
// of the job's headless Service, and the pod's hostname. Nothing outside
// the namespaces changes.
const podScript = `set -e
mount -t tmpfs -o mode=0700 tmpfs /root
mkdir /root/.ssh
mount --bind "$1" /root/.ssh
mount -o remount,ro,bind /root/.ssh
mount --bind "$2" /etc/hosts
hostname "$3"
shift 3
exec "$@"`

// podCommand is argv run as podScript describes.
func podCommand(secret, hosts, hostname string, argv ...string) []string {
	return append([]string{"/usr/bin/unshare", "--mount", "--uts", "/bin/sh", "-c", podScript, "sh", secret, hosts, hostname}, argv...)
}

// writeOperatorSecret writes the SSH Secret the operator makes for a job
// (newSSHAuthSecret: an ECDSA P-521 key as a PEM "EC PRIVATE KEY" and its
// authorized_keys line) as the kubelet lays out a Secret volume with the
// operator's items: a world-writable sticky directory, a timestamped
// directory holding id_rsa, id_rsa.pub and authorized_keys (mode 0600, as
// the operator asks for /root/.ssh), "..data" pointing at it, and a link
// per file through "..data".
func writeOperatorSecret(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	priv := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	authorized := ssh.MarshalAuthorizedKey(pub)
	dir := filepath.Join(t.TempDir(), "ssh-auth")
	stamp := "..2026_01_02_03_04_05.123456789"
	if err := os.MkdirAll(filepath.Join(dir, stamp), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"id_rsa": priv, "id_rsa.pub": authorized, "authorized_keys": authorized}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, stamp, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(stamp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// writePodHosts writes the hosts file the pods bind-mount (podScript),
// standing in for the cluster DNS: the first n workers' names with their
// addresses. It writes in place (same inode), so pods see a rewrite.
func writePodHosts(t *testing.T, path string, hosts []testbed.Host, names []string, n int) {
	t.Helper()
	text := "127.0.0.1\tlocalhost\n"
	for i := range n {
		text += fmt.Sprintf("%s\t%s\tpi-worker-%d\n", hosts[i].Addr, names[i], i)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startWorkerPod starts worker i's pod on host i of b: the agent as its
// command, with its defaults but for a host key under dir (a pod's /etc
// is its own); its output is logged if the test fails.
func startWorkerPod(t *testing.T, b *testbed.Bed, i int, agentBin, secret, etcHosts, dir, name string) *testbed.Proc {
	t.Helper()
	argv := podCommand(secret, etcHosts, fmt.Sprintf("pi-worker-%d", i),
		agentBin, "--host-key", filepath.Join(dir, fmt.Sprintf("host_key_%d", i)))
	cmd := b.Command(t.Context(), i, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "HOME=/root", "K_MPI_JOB_ROLE=worker", "TMPDIR="+t.TempDir())
	p, err := b.StartCmd(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent %s (%s) output:\n%s", name, p, e2e.Tail(p.Output(), 4000))
		}
	})
	return p
}

// TestMPIOperator runs an MPIJob as mpi-operator (v2beta1) sets it up, on
// two namespace hosts: each worker pod's command is the agent in place
// of "/usr/sbin/sshd -De", and the launcher pod runs the launcher with no
// -H, reading the hostfile the operator names in the variable of each
// mpiImplementation (the file at a temporary path, not /etc/mpi), with
// the operator's Secret as ~/.ssh and worker names that resolve as
// <job>-worker-<i>.<job>.<namespace>.svc. Sixteen ranks (slotsPerWorker 8,
// as a GPU job has it) meet at MASTER_ADDR
// (worker 0's address, which the launcher found under its DNS name); the
// launcher exits 0 and nothing is left.
func TestMPIOperator(t *testing.T) {
	roottest.RequireRoot(t)
	agentBin, launcherBin := binaries(t)
	b := newBed(t, testbed.Options{Prefix: "gwo0", Hosts: 2, Subnet: 210})
	hosts := b.Hosts()
	secret := writeOperatorSecret(t)
	dir := t.TempDir()
	names := []string{"pi-worker-0.pi.default.svc", "pi-worker-1.pi.default.svc"}
	etcHosts := filepath.Join(dir, "hosts")
	writePodHosts(t, etcHosts, hosts, names, len(hosts))

	// The worker pods.
	agents := map[int]*testbed.Proc{}
	for i := range hosts {
		agents[i] = startWorkerPod(t, b, i, agentBin, secret, etcHosts, dir, names[i])
	}
	for i, h := range hosts {
		waitBanner(t, fmt.Sprintf("%s:%d", h.Addr, agentPort), agents[i])
	}

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The hostfile and variables of each mpiImplementation
	// (newConfigMap, newLauncherPodTemplate).
	impls := []struct {
		name, file string
		env        []string
	}{
		{"OpenMPI", "pi-worker-0.pi.default.svc slots=8\npi-worker-1.pi.default.svc slots=8\n", []string{
			"OMPI_MCA_orte_keep_fqdn_hostnames=true", "OMPI_MCA_orte_default_hostfile=HOSTFILE",
			"OMPI_MCA_plm_rsh_args=-o ConnectionAttempts=10", "OMPI_MCA_orte_set_default_slots=8"}},
		{"Intel", "pi-worker-0.pi.default.svc:8\npi-worker-1.pi.default.svc:8\n", []string{
			"I_MPI_HYDRA_HOST_FILE=HOSTFILE", "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS=-o ConnectionAttempts=10", "I_MPI_PERHOST=8"}},
		{"MPICH", "pi-worker-0.pi.default.svc:8\npi-worker-1.pi.default.svc:8\n", []string{
			"HYDRA_HOST_FILE=HOSTFILE", "HYDRA_LAUNCH_EXTRA_ARGS=-o ConnectionAttempts=10"}},
	}
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			hf := filepath.Join(t.TempDir(), "hostfile")
			if err := os.WriteFile(hf, []byte(impl.file), 0o444); err != nil {
				t.Fatal(err)
			}
			env := []string{"HOME=/root", "SSH_AUTH_SOCK=", "K_MPI_JOB_ROLE=launcher", "NVIDIA_VISIBLE_DEVICES=", "NVIDIA_DRIVER_CAPABILITIES="}
			for _, e := range impl.env {
				env = append(env, strings.ReplaceAll(e, "HOSTFILE", hf))
			}
			tag := newTag(t)
			argv := podCommand(secret, etcHosts, "pi-launcher", launcherBin, "-l",
				"-x", tagEnv+"="+tag, "-x", helperEnv+"=rendezvous", "-x", "GORACE=atexit_sleep_ms=0", self)
			l := run(t, env, argv[0], argv[1:]...)
			if l.code != 0 {
				t.Fatalf("launcher: %v", l)
			}
			if !strings.Contains(l.stderr.String(), "mpi-operator launcher pod: host keys not in known_hosts are accepted") {
				t.Errorf("launcher did not warn that it accepts unknown host keys:\n%s", l.stderr.String())
			}
			// MASTER_ADDR: the launcher resolved worker 0's name to its
			// address.
			port := checkRendezvous(t, l.stdout.String(), 16, func(r int) string { return names[r/8] }, hosts[0].Addr)
			left := waitNoTagged(t, tag, 10*time.Second)
			for i, h := range hosts {
				waitNetnsOnly(t, h.NS, 10*time.Second, agents[i].Pid)
			}
			t.Logf("%s: 16 ranks on %v, MASTER_ADDR %s:%s; launcher ran %v; no rank left (checked in %v)",
				impl.name, names, hosts[0].Addr, port, l.took.Round(time.Millisecond), left.Round(time.Millisecond))
		})
	}
}

// TestMPIOperatorLateWorker: worker 1's pod comes up after the launcher
// pod started (its agent not running yet and its DNS name not in the
// cluster DNS, as a headless Service publishes a pod's record once it is
// up), flat and through the agent tree (--tree-width 1: worker 0 relays
// for worker 1, as thousands of workers would have it by default). The
// launcher waits for worker 1 (through the tree: worker 0's relay cannot
// resolve the name, and the launcher tries it itself, instead of failing
// at once on a name that does not resolve), and worker 0 waits for worker
// 1's name before it takes its routes to its peers (wire.Hello's
// ResolveWaitMS), so that its network choice finds worker 1. Once the
// record and the agent appear, the sixteen ranks (8 a worker, as a GPU
// job's slotsPerWorker gives) meet and the launcher exits 0.
func TestMPIOperatorLateWorker(t *testing.T) {
	roottest.RequireRoot(t)
	for _, width := range []string{"0", "1"} {
		t.Run("tree-width="+width, func(t *testing.T) { lateWorker(t, width) })
	}
}

func lateWorker(t *testing.T, width string) {
	agentBin, launcherBin := binaries(t)
	b := newBed(t, testbed.Options{Prefix: "gwo1", Hosts: 2, Subnet: 211})
	hosts := b.Hosts()
	secret := writeOperatorSecret(t)
	dir := t.TempDir()
	names := []string{"pi-worker-0.pi.default.svc", "pi-worker-1.pi.default.svc"}
	etcHosts := filepath.Join(dir, "hosts")
	publish := func(n int) { writePodHosts(t, etcHosts, hosts, names, n) }
	worker := func(i int) *testbed.Proc {
		t.Helper()
		p := startWorkerPod(t, b, i, agentBin, secret, etcHosts, dir, names[i])
		waitBanner(t, fmt.Sprintf("%s:%d", hosts[i].Addr, agentPort), p)
		return p
	}
	publish(1)
	w0 := worker(0)

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	hf := filepath.Join(t.TempDir(), "hostfile")
	if err := os.WriteFile(hf, []byte(names[0]+":8\n"+names[1]+":8\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=/root", "SSH_AUTH_SOCK=", "K_MPI_JOB_ROLE=launcher", "NVIDIA_VISIBLE_DEVICES=", "NVIDIA_DRIVER_CAPABILITIES=",
		"HYDRA_HOST_FILE=" + hf, "HYDRA_LAUNCH_EXTRA_ARGS=-o ConnectionAttempts=10"}
	tag := newTag(t)
	argv := podCommand(secret, etcHosts, "pi-launcher", launcherBin, "-l", "--tree-width", width,
		"-x", tagEnv+"="+tag, "-x", helperEnv+"=rendezvous", "-x", "GORACE=atexit_sleep_ms=0", self)
	l := start(t, env, argv[0], argv[1:]...)
	// Worker 1's pod comes up once the launcher has logged in to worker
	// 0 and a moment has passed (worker 0's first lookups of worker 1's
	// name fail, and, flat, the launcher's own).
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(w0.Output(), `"subsystem":"gangway"`) {
		select {
		case <-l.done:
			t.Fatalf("the launcher ended before worker 1 came up: %v", l)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the launcher did not log in to worker 0: %v", l)
		}
	}
	select {
	case <-l.done:
		t.Fatalf("the launcher ended before worker 1 came up: %v", l)
	case <-time.After(time.Second):
	}
	publish(2)
	worker(1)
	if !l.wait(jobTimeout) {
		t.Fatalf("launcher still running after %v: %v", jobTimeout, l)
	}
	if l.code != 0 {
		t.Fatalf("launcher: %v", l)
	}
	port := checkRendezvous(t, l.stdout.String(), 16, func(r int) string { return names[r/8] }, hosts[0].Addr)
	left := waitNoTagged(t, tag, 10*time.Second)
	t.Logf("16 ranks on %v, worker 1 late, MASTER_ADDR %s:%s; launcher ran %v; no rank left (checked in %v)\n%s",
		names, hosts[0].Addr, port, l.took.Round(time.Millisecond), left.Round(time.Millisecond), e2e.Tail(l.stderr.String(), 3000))
}
