// Package kubernetes holds tests of the example manifests only: they parse
// every manifest and hold it to the binaries, start-agent.sh and the
// Dockerfile, so that none of them drifts from the others.
package kubernetes

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/launcher/cli"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	"gopkg.in/yaml.v3"
)

const (
	hostKeyFile    = "ssh_host_ed25519_key" // the workers' host key in their Secrets
	startAgentSrc  = "../start-agent.sh"
	dockerfile     = "../../Dockerfile"
	startAgentPath = "/usr/local/bin/start-agent.sh" // where the Dockerfile installs it
)

// doc is one YAML document of a manifest.
type doc struct {
	file string
	m    map[string]any
}

func (d doc) kind() string { s, _ := d.m["kind"].(string); return s }
func (d doc) name() string { s, _ := get(d.m, "metadata", "name").(string); return s }

func loadDocs(t *testing.T) []doc {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) < 3 {
		t.Fatalf("manifests: %v %v", files, err)
	}
	var docs []doc
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var m map[string]any
			err := dec.Decode(&m)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if m == nil {
				continue
			}
			d := doc{f, m}
			if d.kind() == "" || d.m["apiVersion"] == nil || d.name() == "" {
				t.Errorf("%s: a document without apiVersion, kind or metadata.name", f)
			}
			docs = append(docs, d)
		}
	}
	return docs
}

// get walks maps by keys.
func get(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func list(v any) []map[string]any {
	var out []map[string]any
	l, _ := v.([]any)
	for _, x := range l {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// strs reads a list of strings; Kubernetes takes only strings in command
// and args, so anything else fails the test.
func strs(t *testing.T, where string, v any) []string {
	t.Helper()
	if v == nil {
		return nil
	}
	l, ok := v.([]any)
	if !ok {
		t.Errorf("%s: not a list: %v", where, v)
		return nil
	}
	var out []string
	for _, x := range l {
		s, ok := x.(string)
		if !ok {
			t.Errorf("%s: %v is not a string (quote it)", where, x)
		}
		out = append(out, s)
	}
	return out
}

// podSpecs finds every pod spec (a map with containers) in v.
func podSpecs(v any) []map[string]any {
	var out []map[string]any
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x["containers"]; ok {
			return []map[string]any{x}
		}
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range x {
				if !yield(k) {
					return
				}
			}
		}) {
			out = append(out, podSpecs(x[k])...)
		}
	case []any:
		for _, e := range x {
			out = append(out, podSpecs(e)...)
		}
	}
	return out
}

// agentBin is the agent, built once per test binary.
var agentBin string

func buildAgent(t *testing.T) string {
	t.Helper()
	if agentBin != "" {
		return agentBin
	}
	dir, err := os.MkdirTemp("", "gangway-manifests-")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "agent")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/gangway-hpc/gangway/cmd/agent").CombinedOutput(); err != nil {
		t.Fatalf("go build gangway/cmd/agent: %v\n%s", err, out)
	}
	agentBin = bin
	return bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if agentBin != "" {
		os.RemoveAll(filepath.Dir(agentBin))
	}
	os.Exit(code)
}

// agentFlags are the flag names `agent --help` lists.
func agentFlags(t *testing.T) map[string]bool {
	t.Helper()
	out, _ := exec.CommandContext(t.Context(), buildAgent(t), "--help").CombinedOutput()
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if !flags["listen"] || !flags["host-key"] {
		t.Fatalf("agent --help lists no --listen or --host-key: the help format changed?\n%s", out)
	}
	return flags
}

// checkAgentArgs fails the test for every option agent --help does not
// list, and returns the --listen port (22122 by default).
func checkAgentArgs(t *testing.T, where string, flags map[string]bool, args []string) int {
	t.Helper()
	port := 22122
	for i, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !flags[name] {
			t.Errorf("%s: agent option %s is not in agent --help", where, a)
		}
		if name == "listen" {
			if !hasVal && i+1 < len(args) {
				val = args[i+1]
			}
			_, p, err := net.SplitHostPort(val)
			if port, err = strconv.Atoi(p); err != nil {
				t.Errorf("%s: --listen %q: %v", where, val, err)
			}
		}
	}
	return port
}

// script is what start-agent.sh reads: its GANGWAY_* variables, the
// default secrets directory and the key files it looks for there.
type script struct {
	vars           map[string]bool
	defaultSecrets string
	keys           map[string]bool
	hostCert       bool // it passes the Secret's host certificate as --host-cert
}

func readScript(t *testing.T) script {
	t.Helper()
	b, err := os.ReadFile(startAgentSrc)
	if err != nil {
		t.Fatal(err)
	}
	s := script{vars: map[string]bool{}, keys: map[string]bool{}}
	for _, m := range regexp.MustCompile(`\$\{(GANGWAY_[A-Z_]+)`).FindAllStringSubmatch(string(b), -1) {
		s.vars[m[1]] = true
	}
	if m := regexp.MustCompile(`secrets=\$\{GANGWAY_SECRETS:-([^}]+)\}`).FindStringSubmatch(string(b)); m != nil {
		s.defaultSecrets = m[1]
	}
	for _, m := range regexp.MustCompile(`\$secrets/([A-Za-z0-9_.-]+)`).FindAllStringSubmatch(string(b), -1) {
		s.keys[m[1]] = true
	}
	s.hostCert = strings.Contains(string(b), `--host-cert "$secrets/`+hostKeyFile+`-cert.pub"`)
	if len(s.vars) < 5 || s.defaultSecrets == "" || !s.keys["authorized_keys"] || !s.hostCert {
		t.Fatalf("start-agent.sh: cannot read its variables %v, secrets default %q, keys %v or its --host-cert: its form changed?", s.vars, s.defaultSecrets, s.keys)
	}
	return s
}

// secretKeys are the keys of the Secret named name (data and stringData).
func secretKeys(docs []doc, name string) (map[string]string, bool) {
	for _, d := range docs {
		if d.kind() != "Secret" || d.name() != name {
			continue
		}
		keys := map[string]string{}
		for _, field := range []string{"data", "stringData"} {
			if m, ok := d.m[field].(map[string]any); ok {
				for k, v := range m {
					keys[k], _ = v.(string)
				}
			}
		}
		return keys, true
	}
	return nil, false
}

// mountFor finds the volume mounted at exactly dir (or, with under, the
// mount holding path) in container c of pod spec p.
func mountFor(p, c map[string]any, file string, under bool) (mount, volume map[string]any) {
	for _, vm := range list(c["volumeMounts"]) {
		mp, _ := vm["mountPath"].(string)
		if mp == file || (under && strings.HasPrefix(file, strings.TrimSuffix(mp, "/")+"/")) {
			for _, v := range list(p["volumes"]) {
				if v["name"] == vm["name"] {
					return vm, v
				}
			}
			return vm, nil
		}
	}
	return nil, nil
}

// TestDockerfileInstallsStartAgent: the manifests run start-agent.sh at
// startAgentPath, so the image must put it there, with both binaries on PATH.
func TestDockerfileInstallsStartAgent(t *testing.T) {
	b, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"COPY examples/start-agent.sh " + startAgentPath,
		"COPY --from=build /out/launcher /out/agent /usr/local/bin/",
		"./cmd/launcher ./cmd/agent",
		"ARG BASE=",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}

// TestManifests holds every container of every manifest to what it runs:
// launcher arguments parse with cli.Parse (after the operator's
// hostfile, in its format, is put where the MPIJob reads it); agent
// options are in agent --help; start-agent.sh runs at the image's path
// with only variables it reads, its Secret mounted whole where it looks,
// with keys it knows; the launcher dials the workers' names and port and
// its known_hosts pattern matches them; ranks fit the GPUs asked for.
func TestManifests(t *testing.T) {
	docs := loadDocs(t)
	flags := agentFlags(t)
	sc := readScript(t)

	type worker struct {
		names      []string // DNS names the pods get
		port       int
		gpus       int
		principals []string // what their host certificate is signed for (certs.sh host in the manifest)
	}
	workers := map[string]worker{} // by file
	type launch struct {
		where      string
		cfg        cli.Config
		knownHosts string // the known_hosts text from its Secret, if any
	}
	var launches []launch
	counts := map[string]int{}

	for _, d := range docs {
		counts[d.kind()]++
		if d.kind() == "MPIJob" && d.m["apiVersion"] != "kubeflow.org/v2beta1" {
			t.Errorf("%s: MPIJob apiVersion %v, want kubeflow.org/v2beta1", d.file, d.m["apiVersion"])
		}
		for _, p := range podSpecs(d.m["spec"]) {
			for _, c := range list(p["containers"]) {
				where := fmt.Sprintf("%s: %s %s container %v", d.file, d.kind(), d.name(), c["name"])
				argv := append(strs(t, where+" command", c["command"]), strs(t, where+" args", c["args"])...)
				if len(argv) == 0 {
					t.Errorf("%s: no command", where)
					continue
				}
				gpus := 0
				if g, ok := get(c, "resources", "limits", "nvidia.com/gpu").(int); ok {
					gpus = g
				}
				env := map[string]string{}
				for _, e := range list(c["env"]) {
					n, _ := e["name"].(string)
					v, _ := e["value"].(string)
					env[n] = v
				}
				switch path.Base(argv[0]) {
				case "launcher":
					args := slices.Clone(argv[1:])
					if d.kind() == "MPIJob" {
						args = operatorHostfile(t, d, args)
					}
					cfg, err := cli.Parse(args, func(string) string { return "" }, nil)
					if err != nil {
						t.Errorf("%s: launcher %s: %v", where, strings.Join(argv[1:], " "), err)
						continue
					}
					if len(cfg.Argv) == 0 {
						t.Errorf("%s: the launcher runs no program", where)
					}
					l := launch{where: where, cfg: cfg}
					// Host certificates: the launcher trusts the workers'
					// host CA from its known_hosts, never a key first seen.
					if cfg.Transport.AcceptNewHosts {
						t.Errorf("%s: --accept-new-host-keys trusts whatever answers first; trust the workers' host CA", where)
					}
					if cfg.Transport.KnownHosts == "" {
						t.Errorf("%s: no --known-hosts with the workers' host CA", where)
					}
					// Identity and known_hosts come from a mounted Secret
					// (the identity from the operator's in an MPIJob).
					for _, f := range []string{cfg.Transport.Identity, cfg.Transport.KnownHosts} {
						if f == "" {
							continue
						}
						if d.kind() == "MPIJob" && f == cfg.Transport.Identity {
							mp, _ := get(d.m, "spec", "sshAuthMountPath").(string)
							if path.Dir(f) != mp {
								t.Errorf("%s: %s is not in sshAuthMountPath %q, where the operator mounts its keys", where, f, mp)
							}
							continue
						}
						_, vol := mountFor(p, c, f, true)
						name, _ := get(vol, "secret", "secretName").(string)
						keys, ok := secretKeys(docs, name)
						if _, has := keys[path.Base(f)]; !ok || !has {
							t.Errorf("%s: %s is on no mounted Secret of the manifests (Secret %q)", where, f, name)
						}
						if f == cfg.Transport.KnownHosts {
							l.knownHosts = keys[path.Base(f)]
						}
					}
					launches = append(launches, l)
				case "agent":
					port := checkAgentArgs(t, where, flags, argv[1:])
					checkHostIdentity(t, where, docs, p, c, argv[1:])
					if d.kind() == "MPIJob" {
						w := workers[d.file]
						w.port, w.gpus, w.principals = port, gpus, certPrincipals(t, d.file)
						workers[d.file] = w
					}
				case "start-agent.sh":
					if argv[0] != startAgentPath {
						t.Errorf("%s: runs %s, but the image installs %s", where, argv[0], startAgentPath)
					}
					if len(argv) > 1 {
						t.Errorf("%s: start-agent.sh takes no arguments (GANGWAY_ARGS): %v", where, argv[1:])
					}
					for n := range env {
						if strings.HasPrefix(n, "GANGWAY_") && !sc.vars[n] {
							t.Errorf("%s: sets %s, which start-agent.sh does not read", where, n)
						}
					}
					checkAgentArgs(t, where+" GANGWAY_ARGS", flags, strings.Fields(env["GANGWAY_ARGS"]))
					port := 22122
					if v, ok := env["GANGWAY_PORT"]; ok {
						port, _ = strconv.Atoi(v)
					}
					secrets := cmp.Or(env["GANGWAY_SECRETS"], sc.defaultSecrets)
					vm, vol := mountFor(p, c, secrets, false)
					name, _ := get(vol, "secret", "secretName").(string)
					keys, ok := secretKeys(docs, name)
					switch {
					case vm == nil:
						t.Errorf("%s: nothing is mounted at %s, where start-agent.sh reads its Secret", where, secrets)
					case vm["subPath"] != nil:
						t.Errorf("%s: the Secret is mounted with subPath: updates never reach it", where)
					case !ok:
						t.Errorf("%s: %s is not a Secret of the manifests (%v)", where, secrets, vol)
					}
					if keys["authorized_keys"] == "" && keys["trusted_user_ca_keys"] == "" {
						t.Errorf("%s: Secret %q has neither authorized_keys nor trusted_user_ca_keys", where, name)
					}
					for _, k := range []string{hostKeyFile, hostKeyFile + "-cert.pub"} {
						if keys[k] == "" {
							t.Errorf("%s: Secret %q has no %s: the workers present a host certificate (start-agent.sh passes it as --host-cert)", where, name, k)
						}
					}
					for k := range keys {
						if !sc.keys[k] {
							t.Errorf("%s: Secret %q key %s is not a file start-agent.sh reads", where, name, k)
						}
					}
					if ports := list(c["ports"]); len(ports) == 0 || ports[0]["containerPort"] != port {
						t.Errorf("%s: containerPort %v, want GANGWAY_PORT %d", where, ports, port)
					}
					if d.kind() == "StatefulSet" {
						replicas, _ := get(d.m, "spec", "replicas").(int)
						svc, _ := get(d.m, "spec", "serviceName").(string)
						w := worker{port: port, gpus: gpus, principals: certPrincipals(t, d.file)}
						for i := range replicas {
							w.names = append(w.names, fmt.Sprintf("%s-%d.%s", d.name(), i, svc))
						}
						workers[d.file] = w
					}
				default:
					t.Errorf("%s: runs %s, neither launcher, agent nor start-agent.sh", where, argv[0])
				}
			}
		}
	}
	for _, k := range []string{"StatefulSet", "Service", "Secret", "Job", "MPIJob"} {
		if counts[k] == 0 {
			t.Errorf("no %s in the manifests", k)
		}
	}

	// The launchers reach the workers their manifests define.
	for _, l := range launches {
		var w worker
		if strings.HasPrefix(l.where, "mpijob") {
			w = workers[strings.SplitN(l.where, ":", 2)[0]]
		} else {
			w = workers["workers.yaml"]
		}
		port := l.cfg.Transport.Port
		slots := 0
		for _, h := range l.cfg.Place.Hosts {
			if w.names != nil && !slices.Contains(w.names, h.Name) {
				t.Errorf("%s: host %s is none of the workers %v", l.where, h.Name, w.names)
			}
			if h.Port != 0 {
				port = h.Port
			}
			if h.Slots > w.gpus {
				t.Errorf("%s: host %s has %d slots but its pod asks for %d GPUs", l.where, h.Name, h.Slots, w.gpus)
			}
			slots += h.Slots
		}
		if port != w.port {
			t.Errorf("%s: dials port %d, the workers listen on %d", l.where, port, w.port)
		}
		if l.cfg.Place.NP > slots {
			t.Errorf("%s: -np %d, but the hosts have %d slots", l.where, l.cfg.Place.NP, slots)
		}
		checkHostCerts(t, l.where, l.knownHosts, l.cfg, port, w.principals)
	}
	if len(launches) < 2 || len(workers) < 2 {
		t.Errorf("found %d launchers and %d worker sets, want the Job and the MPIJob with their workers", len(launches), len(workers))
	}
}

// operatorHostfile writes the hostfile the MPI Operator mounts at
// /etc/mpi/hostfile for an MPIJob (Open MPI's form, one line per worker:
// <job>-worker-<i>.<job>.<namespace>.svc slots=<slotsPerWorker>) and
// points the launcher's -hostfile there.
func operatorHostfile(t *testing.T, d doc, args []string) []string {
	t.Helper()
	slots, _ := get(d.m, "spec", "slotsPerWorker").(int)
	replicas, _ := get(d.m, "spec", "mpiReplicaSpecs", "Worker", "replicas").(int)
	var b strings.Builder
	for i := range replicas {
		fmt.Fprintf(&b, "%s-worker-%d.%s.default.svc slots=%d\n", d.name(), i, d.name(), slots)
	}
	f := filepath.Join(t.TempDir(), "hostfile")
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	i := slices.Index(args, "-hostfile")
	if i < 0 || i+1 >= len(args) || args[i+1] != "/etc/mpi/hostfile" {
		t.Errorf("%s: the MPIJob's launcher does not read the operator's -hostfile /etc/mpi/hostfile: %v", d.file, args)
		return args
	}
	args[i+1] = f
	return args
}

// checkHostIdentity: an agent run directly presents a host certificate:
// --host-key and --host-cert (the key's -cert.pub, as ssh-keygen names
// it), both from a Secret of the manifests mounted in its pod.
func checkHostIdentity(t *testing.T, where string, docs []doc, p, c map[string]any, args []string) {
	t.Helper()
	val := func(name string) string {
		for i, a := range args {
			n, v, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
			switch {
			case n == name && ok:
				return v
			case n == name && i+1 < len(args):
				return args[i+1]
			}
		}
		return ""
	}
	key, cert := val("host-key"), val("host-cert")
	if key == "" || cert != key+"-cert.pub" {
		t.Errorf("%s: --host-key %q --host-cert %q: want the key and its certificate (KEY-cert.pub)", where, key, cert)
		return
	}
	for _, f := range []string{key, cert} {
		_, vol := mountFor(p, c, f, true)
		name, _ := get(vol, "secret", "secretName").(string)
		keys, ok := secretKeys(docs, name)
		if _, has := keys[path.Base(f)]; !ok || !has {
			t.Errorf("%s: %s is on no mounted Secret of the manifests (Secret %q)", where, f, name)
		}
	}
}

// certPrincipals are the names the manifest's `certs.sh host DIR KEY
// NAMES` comment signs the workers' host key for.
func certPrincipals(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`certs\.sh host \S+ \S+ (\S+)`).FindAllStringSubmatch(string(b), -1)
	if len(m) != 1 {
		t.Errorf("%s: %d `certs.sh host CA KEY.pub NAMES` lines, want the one that signs the workers' host certificate", file, len(m))
		return nil
	}
	return strings.Split(m[0][1], ",")
}

// checkHostCerts: the launcher's known_hosts trusts the host CA, and
// nothing else, for every host it dials, and the workers' certificate
// (as the manifests' certs.sh line signs it) passes there: with the CA
// line's key replaced by a test CA's, x/crypto's knownhosts (which the
// launcher uses) takes a certificate that CA signed for the principals
// and refuses a plain key, as it would an impostor's.
func checkHostCerts(t *testing.T, where, text string, cfg cli.Config, port int, principals []string) {
	t.Helper()
	ca := newSigner(t)
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if f[0] != "@cert-authority" || len(f) < 4 {
			t.Errorf("%s: known_hosts line %q is not a @cert-authority line: trust the workers' host CA, not a key", where, l)
			continue
		}
		lines = append(lines, strings.Join([]string{f[0], f[1], strings.TrimSpace(string(ssh.MarshalAuthorizedKey(ca.PublicKey())))}, " "))
	}
	if len(lines) == 0 {
		t.Errorf("%s: known_hosts has no @cert-authority line", where)
		return
	}
	f := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(f, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cb, err := knownhosts.New(f)
	if err != nil {
		t.Fatalf("%s: known_hosts: %v", where, err)
	}
	key := newSigner(t).PublicKey()
	cert := &ssh.Certificate{Key: key, CertType: ssh.HostCert, KeyId: "workers", ValidPrincipals: principals, ValidBefore: ssh.CertTimeInfinity}
	if err := cert.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	addr := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: port}
	for _, h := range cfg.Place.Hosts {
		hp := net.JoinHostPort(h.Name, strconv.Itoa(port))
		if err := cb(hp, addr, cert); err != nil {
			t.Errorf("%s: the workers' certificate (certs.sh host ... %s) is refused for %s: %v", where, strings.Join(principals, ","), hp, err)
		}
		var ke *knownhosts.KeyError
		if err := cb(hp, addr, newSigner(t).PublicKey()); !errors.As(err, &ke) || len(ke.Want) == 0 {
			t.Errorf("%s: a plain key for %s: %v, want it refused (no CA line matches the host)", where, hp, err)
		}
	}
}

func newSigner(t *testing.T) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
