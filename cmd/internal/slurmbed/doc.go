// Package slurmbed builds a real Slurm cluster on one machine for
// gangway's tests and `make bench`: Debian 12's slurmctld, slurmd,
// slurm-client and munge (Slurm 22.05) on network-namespace hosts from
// cmd/internal/testbed.
//
// A bed with prefix P, subnet S and N nodes is a testbed of N+1 hosts:
//
//	host 0   198.18.S.1      hostname "Pctl": munged and slurmctld
//	host i   198.18.S.(i+1)  hostname "cn<i>" (i = 1..N): slurmd -N cn<i>
//	bridge   198.18.S.254    in the root namespace, where srun, salloc,
//	                         sbatch, scancel and the launcher run (a login node)
//
// Every daemon runs as root in its host's network namespace, its own UTS
// namespace (so `hostname` says cn<i>, as Slurm and the ranks expect) and
// its own mount namespace (private propagation), where a hosts file naming
// every node is bind-mounted over /etc/hosts: on the nodes, node
// names resolve as on a real cluster. With Options.LocalNamesOnly each
// node's file names only the controller and itself, as where NodeName is
// no DNS name: a node's name then resolves nowhere but on that node. Everything else of the bed, slurm.conf, munge's key and socket,
// state, spool, logs and pid files, lives in one temporary directory (Dir).
// Slurm's commands find the bed through SLURM_CONF (Env); nothing is
// written under /etc and no distribution service is started.
//
// Facts it rests on (see docs/testbed.md, "Slurm on namespace
// hosts"): slurm.conf names every node with NodeAddr=<ip>, so nothing is
// looked up; proctrack/linuxproc, task/none, no accounting; slurmd 22.05
// always loads a cgroup plugin and its auto-detection fails under ip netns
// exec, so cgroup.conf names cgroup/v1, which mounts nothing here;
// SlurmdParameters=config_overrides lets a node declare more CPUs than the
// machine has (Options.CPUs); munged's socket is a file path, so the
// daemons of every namespace reach the one munged (AuthInfo=socket=...).
//
// Close stops every daemon (the testbed's tracked processes: SIGTERM, then
// SIGKILL), kills whatever else is left in the bed's namespaces (steps,
// agents, ranks), removes the namespaces and links, checks that no process
// anywhere still has this bed's SLURM_CONF in its environment (a srun,
// salloc or launcher a test left behind: killed by PID and reported), and
// removes the directory.
//
// The package does not import package testing, so the bench can use it;
// tests call Require (in slurmbed/slurmtest) for the root and package
// checks.
package slurmbed
