package main

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// Launcher names, as printed.
const (
	lGangway     = "gangway"
	lGangwayCold = "gangway cold (--transport ssh)"
	lGangwayRaw  = "gangway untagged (--tags auto)"
	lMpirun      = "mpirun (tree)"
	lMpirunFlat  = "mpirun (no tree)"
	lHydra       = "mpiexec.hydra"
	lHydraTag    = "mpiexec.hydra -prepend-rank"
	lPdsh        = "pdsh"
	lFanout      = "ssh fan-out (bash)"
	lPipes       = "local pipes (gen | cat)"
)

// Peer programs; a missing one is skipped with a note.
const (
	mpirunBin = "mpirun.openmpi"
	hydraBin  = "mpiexec.hydra"
	pdshBin   = "pdsh"
	mpiccBin  = "mpicc.mpich"
)

func have(bin string) bool { _, err := exec.LookPath(bin); return err == nil }

// jobSpec is a job on the first Hosts hosts of the bed, PerHost ranks each.
type jobSpec struct {
	Hosts, PerHost int
	// NP is the rank count when not every slot runs one (the hosts past
	// NP / PerHost stand by as spares); 0 means Hosts x PerHost.
	NP   int
	Argv []string
	Env  []string // KEY=VALUE for every rank
	Tag  bool     // tag output lines with the rank
}

func (j jobSpec) np() int {
	if j.NP > 0 {
		return j.NP
	}
	return j.Hosts * j.PerHost
}

// gangway: the launcher against the agents already running in every host.
func (e *netEnv) gangway(j jobSpec) []string {
	a := []string{e.bins.launcher, "-i", e.keys.ClientKey, "--known-hosts", e.kh, "-p", strconv.Itoa(agentPort),
		"-np", strconv.Itoa(j.np()), "-H", e.hostList(j.Hosts, j.PerHost, 0)}
	if j.Tag {
		a = append(a, "-l")
	}
	for _, kv := range j.Env {
		a = append(a, "-x", kv)
	}
	return append(a, j.Argv...)
}

// gangwayCold: the launcher starting `agent --stdio` in every host through
// OpenSSH, as on hosts that run only a stock sshd.
func (e *netEnv) gangwayCold(j jobSpec) []string {
	var opts []string // e.sshArgs without -p: the port goes in -H, where the launcher sees it
	for i := 0; i < len(e.sshArgs); i++ {
		if e.sshArgs[i] == "-p" {
			i++
			continue
		}
		opts = append(opts, e.sshArgs[i])
	}
	a := []string{e.bins.launcher, "--transport", "ssh", "--ssh", "/usr/bin/ssh " + strings.Join(opts, " "),
		"--agent-path", e.bins.agent, "-np", strconv.Itoa(j.np()), "-H", e.hostList(j.Hosts, j.PerHost, sshdPort)}
	if j.Tag {
		a = append(a, "-l")
	}
	for _, kv := range j.Env {
		a = append(a, "-x", kv)
	}
	return append(a, j.Argv...)
}

// mpirun: Open MPI over the sshds, setup traffic on the bed's subnet.
func (e *netEnv) mpirun(j jobSpec, tree bool) ([]string, error) {
	hf, err := e.hostfile("ompi", j.Hosts, j.PerHost)
	if err != nil {
		return nil, err
	}
	subnet := fmt.Sprintf("198.18.%d.0/24", bedSubnet)
	a := []string{mpirunBin, "--allow-run-as-root", "--mca", "plm_rsh_agent", e.sshWrap,
		"--mca", "oob_tcp_if_include", subnet, "--mca", "btl_tcp_if_include", subnet,
		"--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
		"--hostfile", hf, "-np", strconv.Itoa(j.np())}
	if !tree {
		a = append(a, "--mca", "plm_rsh_no_tree_spawn", "1")
	}
	if j.Tag {
		a = append(a, "--tag-output")
	}
	for _, kv := range j.Env {
		a = append(a, "-x", kv)
	}
	return append(a, j.Argv...), nil
}

// hydra: MPICH's mpiexec over the sshds; -iface names the root
// namespace's bridge so its proxies dial back to a reachable address.
func (e *netEnv) hydra(j jobSpec) ([]string, error) {
	hf, err := e.hostfile("hydra", j.Hosts, j.PerHost)
	if err != nil {
		return nil, err
	}
	a := []string{hydraBin, "-launcher", "ssh", "-launcher-exec", e.sshWrap, "-iface", e.bed.Bridge(),
		"-f", hf, "-n", strconv.Itoa(j.np())}
	if j.Tag {
		a = append(a, "-prepend-rank")
	}
	for _, kv := range j.Env {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "-genv", k, v)
	}
	return append(a, j.Argv...), nil
}

// shellTrue8 is what pdsh and the fan-out run on each host: 8 /bin/true
// at once, as 8 ranks.
const shellTrue8 = "for i in 1 2 3 4 5 6 7 8; do /bin/true & done; wait"

// pdsh: pdsh -R ssh with the same ssh options.
func (e *netEnv) pdsh(hosts int) ([]string, []string) {
	env := []string{"PDSH_SSH_ARGS=" + strings.Join(e.sshArgs, " ") + " -l%u %h"}
	return []string{pdshBin, "-R", "ssh", "-f", "256", "-w", pdshHosts(hosts), shellTrue8}, env
}

// sshFanout: one ssh per host from bash, all at once.
func (e *netEnv) sshFanout(hosts int) []string {
	return append([]string{e.fanout, shellTrue8}, e.addrs(hosts)...)
}
