package cli

// Usage is the --help text. Keep it true to the flags (flags.go,
// compat.go): the tests check that every flag is in it and that README.md
// holds it verbatim.
const Usage = `usage: launcher [options] PROGRAM [ARGS...]

Runs PROGRAM as a gang of ranks over the hosts' agents (or locally, in
process, when no hosts are given) with MPI, PyTorch and Horovod environments.

Examples:
  launcher -np 4 python3 train.py                     # 4 ranks on this machine
  launcher -np 16 -H hostA:8,hostB:8 python3 train.py # agents on port 22122
  launcher -hostfile hosts.txt -x NCCL_DEBUG=INFO ./all_reduce_perf -b 8 -e 128M
  launcher --dry-run -np 16 -H a:8,b:8 python3 train.py
  launcher --analyze run1.log run2.log                # throughput of saved logs

Hosts (default: this machine, -np defaulting to one rank per GPU, else per CPU):
  -H, -host, -hosts LIST   [user@]host[:slots[:port]],...  (repeated hosts add
                           slots); host may be a Slurm or pdsh range,
                           gpu[01-04,07]:8 (each expanded host gets the slots)
  -hostfile, -machinefile, -f FILE
                           Open MPI (host slots=N [max_slots=M] [port=P];
                           cpu=N and count=N are slots, max-slots=M is
                           max_slots, as Open MPI reads them), MPICH
                           (host:N) or PBS nodefile, hosts as in -H ranges
                           (gpu[01-04] slots=8); when no hosts are
                           given, read in this order: mpi-operator's
                           hostfile ($OMPI_MCA_orte_default_hostfile,
                           $PRTE_MCA_prte_default_hostfile,
                           $I_MPI_HYDRA_HOST_FILE, $HYDRA_HOST_FILE),
                           Slurm's SLURM_JOB_NODELIST/SLURM_TASKS_PER_NODE
                           (the agents are then started with srun:
                           -transport slurm; run the launcher once, not
                           under an srun of several tasks), $PBS_NODEFILE
  -np, -n, -c, -num-proc N number of ranks (default: every slot)
  -N, -npernode, -ppn, -perhost N
                           ranks per host; -pernode: one; -ppn and -perhost
                           (Hydra's) give each host at least N slots
  -nproc-per-node, -nproc_per_node, -num_gpus N|gpu|cpu|auto
                           torchrun's and DeepSpeed's ranks per host: N slots
                           on each host (locally: -np N); gpu, cpu: as many
                           as the host has GPUs (an error on a host with
                           none), CPUs; auto: GPUs, else CPUs
  -nnodes, -num_nodes N    use the first N hosts (error if fewer); torchrun's
                           elastic MIN:MAX is refused (fixed size; see
                           -max-restarts)
  -standalone              this machine only (torchrun; ignores Slurm/PBS)
  -map-by slot|node|core|hwthread|socket|ppr:N:node|ppr:N:socket[:PE=n]
                           fill each host (default), deal round robin, fill
                           each host with ranks bound to a core, a hardware
                           thread or a socket (dealt round robin; -bind-to
                           wins), or N ranks per host or per socket (sockets
                           from the hosts' facts; binds each rank to its
                           socket); :PE=n binds each rank to n consecutive
                           CPUs (slot:PE=n, node:PE=n, ppr:N:node:PE=n);
                           :OVERSUBSCRIBE, :NOOVERSUBSCRIBE, :DISPLAY as
                           mpirun; numa and ppr:N:numa are refused
  -rr, -bynode, -byslot    -map-by node (Intel MPI's -rr, old mpirun's), slot
  -cpus-per-proc, -cpus-per-rank N
                           -map-by slot:PE=N (old mpirun's)
  -rank-by slot|node       number a host's ranks consecutively, or round
                           robin over hosts (default: as -map-by deals them)
  -oversubscribe           allow more ranks than slots
  -nooversubscribe         accepted for mpirun: the default
  -gpus-per-rank, -gpus-per-proc K
                           CUDA_VISIBLE_DEVICES gets K GPUs per rank (default 1)
  -gpus LIST               GPU indices to use on every host (0,2,...)
  -include HOST[:GPUS]@... DeepSpeed's: only these hosts run ranks, a host
                           with GPUs gets only those, one rank each
                           (host:0,1@host2); a host not among the hosts is
                           an error
  -exclude HOST[:GPUS]@... DeepSpeed's: drop a host named alone; a host with
                           GPUs loses those GPUs and a slot for each
  -bind-to none|numa|core|hwthread|socket
                           CPU binding: none, the CPUs of the rank's GPU's
                           NUMA node, one CPU per rank (core, hwthread), or
                           the CPUs of one socket (round robin); core:N
                           (Hydra) binds N CPUs per rank (PE=N);
                           :overload-allowed, :if-supported are accepted
  -report-bindings         print each rank's CPU binding

Network and node preparation:
  -network-interface, -network-interfaces, -iface NAME[,NAME]
                           force the data interface on every host
                           (default: per host, the interface its routes to
                           the other hosts use; sets NCCL_SOCKET_IFNAME,
                           GLOO_SOCKET_IFNAME, HOROVOD_GLOO_IFACE, NCCL_IB_HCA)
  -preflight=false         skip the check that every host reaches every other
                           host's agent before ranks start (multi-host jobs)
  -drop-caches[=1|2|3]     sync and drop page caches on every host first (3)
  -drop-caches-best-effort go on when a host may not drop its caches
  -selftest[=strict]       before the ranks start, hosts stream to their
                           ring neighbours and a few chords (64 MiB or 2 s
                           each way), one stream per host at a time; print
                           MB/s per pair and name slow hosts (under a third
                           of the median host); spares take their places
                           where they stand by (-spares), else =strict stops
                           the job (exit 1, nothing started)
  -inspect [-json] [-v]    print each host's facts, the NCCL and Gloo
                           variables its ranks would get (each with its
                           source: nccl, forwarded, -x...) and their GPUs,
                           then exit (NICs that are down or have only
                           link-local addresses are listed with -v or -json)

Environment rule (the same for ranks here and on other hosts):
  every rank starts from its host's environment (the agent's; here, the
  launcher's) and gets the launcher's environment less host-specific
  names (HOSTNAME, DISPLAY, SSH_*, PWD, TMPDIR, SLURM_*, PMI_*, OMPI_* but
  OMPI_MCA_*, ...: docs/environment.md lists them) and the login's HOME,
  USER, LOGNAME and SHELL; the launcher's variables (rank, placement,
  per-host NCCL choice) win over those; -x, -genv and -env-file win over
  everything but a rank's identity. -dry-run shows each variable's source.

Environment:
  -x NAME | NAME=VALUE | 'PREFIX*'   export to every rank (repeatable); an
                           unset NAME or a rank identity (RANK...) warns
  -genv, -env NAME VALUE   Hydra's -x NAME=VALUE (a later -x/-genv wins)
  -genvall, -envall        forward the launcher's environment less the
                           host-specific names (the default)
  -genvnone, -envnone      forward none of it to other hosts (they get -x,
                           -genv, -env-file only; ranks here inherit it)
  -genvlist, -envlist A,B  forward only these names (repeatable)
  -env-file FILE           KEY=VALUE lines exported to every rank (# starts
                           a comment line, "export " and one pair of
                           enclosing quotes are dropped, nothing is
                           expanded); as DeepSpeed, ~/.deepspeed_env and
                           then ./.deepspeed_env ($DS_ENV_FILE names them)
                           are read first: -env-file, -x, -genv win over them
  -master-addr, -master_addr ADDR, -master-port, -master_port PORT
                           MASTER_ADDR/MASTER_PORT of every rank, used as
                           given (default: rank 0's data address and a port
                           free on its host)
  -mca, -gmca KEY VALUE    OMPI_MCA_KEY=VALUE in every rank
  -wdir, -wd DIR           working directory of every rank
  -mpi auto|pmi|none|openmpi
                           auto/pmi: serve PMI-1/PMI-2 to MPICH-family ranks
                           (default auto, which runs a program linked
                           against Open MPI's libmpi as openmpi does; -v
                           says what it found); none: no PMI; openmpi: run
                           Open MPI's mpirun with the agents as its ssh
                           transport (launcher --rsh HOST CMD is that
                           transport); -mpi followed by an option
                           (horovodrun's) is auto
  -usize, -universe-size N|SYSTEM|INFINITE
                           the universe size PMI tells ranks
                           (MPI_UNIVERSE_SIZE): N, SYSTEM (the slots of the
                           hosts that run ranks) or INFINITE; default, as
                           Hydra: unknown (-1)
  -tf-config PORT          TF_CONFIG for TensorFlow's MultiWorkerMirrored-
                           Strategy, as Kubeflow's TFJob writes it: every
                           rank a worker at its host's data address, port
                           PORT plus its local rank (TFJob uses 2222)

Output (rank lines go to stdout/stderr whole, never mixed):
  -tags auto|none|rank|mpirun
                           how lines show their rank: auto (default) tags
                           [R]  when stdout is a terminal and prints lines
                           untagged otherwise (pipes, files, scripts), as
                           mpirun and Hydra print them unless asked;
                           none: exactly as the rank wrote them
  -l, -prepend-rank        tags [R]  (Hydra's spelling; -tags rank)
  -tag-output              tags [1,R]<stdout>: (mpirun's; -tags mpirun)
  -timestamp-output        prefix lines with their arrival time
  -output-filename, -log-dir, -log_dir, -enable_each_rank_log DIR
                           also write DIR/rank.R/stdout and stderr
  -output LIST             Open MPI 5's: tag, timestamp,
                           merge-stderr-to-stdout, dir=DIR
  -display map,bind        Open MPI 5's: -display-map, -report-bindings
  -output-from RANKS       console shows only these ranks (0,4-7)
  -stdin RANK|none         rank that gets the launcher's stdin (default 0;
                           none read in the background of a terminal)
  -merge-stderr-to-stdout  rank stderr goes to the launcher's stdout
  -display-map, -print-rank-map
                           print the placement table (as -dry-run's) on
                           stderr, then run
  -q, -quiet               no informational launcher lines: logs below
                           warnings, restart notices, progress, summary
                           (errors and rank output stay)
  -progress[=false]        a status line every -progress-every SECONDS (5)
                           while ranks report throughput: attempt, elapsed,
                           total so far, ranks reporting, slowest rank and
                           host (default: on when stderr is a terminal)

Throughput (summary printed at the end when ranks print known formats):
  -metric NAME=REGEX       extra recogniser; named group 'value' (repeatable)
  -metric-scope rank|global  whether -metric values are summed over ranks
  -warmup-steps N          samples per rank left out as warm-up
  -straggler-threshold F   flag ranks F below the median (default 0.05)
  -baseline-ips X          single-GPU throughput, for scaling efficiency
  -report FILE.json        write the full report (throughput, attempts and
                           the failure report: each failed rank's host,
                           exit code, signal, stderr tail, root cause)
  -plot FILE.png           draw per-rank throughput: each rank's mean as
                           a bar graded by its distance below the median,
                           beside the series over time
  -no-summary              do not print the summary
  -analyze FILES...        analyse saved logs instead of running; lines
                           are attributed to ranks by their tags, so save
                           logs with -l or -tag-output; of untagged lines,
                           one rank's are rank 0's, several ranks'
                           end-of-run totals are summed (and it says so),
                           and interleaved steps without them are an
                           error (exit 1)

Health (checked on every host before each attempt; README "Failures at
scale"; a host that fails stops the job before any rank starts):
  -gpus-per-host N         GPUs every host must have (default: as many as
                           most hosts have)
  -health-check CMD        the site's own check: /bin/sh -c CMD on every
                           host, as the job's user, with GANGWAY_HOST set to
                           the host's name; non-zero exit is unhealthy, and
                           its output (4 KiB at most) is in the message
  -health-check-timeout SECONDS
                           how long CMD may take before it is killed and
                           fails (default 30; below -start-timeout)
  -health-min-tmp SIZE     free space the ranks' TMPDIR needs (default 1G;
                           K, M, G, T; 0: only that it exists)
  -no-health-check         start without checking the hosts
                           (-inspect shows every check)

Control:
  -timeout SECONDS         stop the job after this long (restarts included),
                           exit 124 (default: $MPIEXEC_TIMEOUT, as mpiexec);
                           the stacks, then the stop, take at most
                           -kill-grace each (+3s for hosts to confirm)
  -kill-grace DURATION     SIGTERM to SIGKILL delay when stopping (default 5s);
                           hosts that have not confirmed their ranks' end
                           -kill-grace + 3s after the stop are cut off
  -max-restarts, -max_restarts N
                           after a rank failure or a lost agent, start the
                           whole gang again, up to N times (default 0); never
                           after a signal or -timeout
  -restart-backoff SECONDS wait before each restart (default 1)
  -run-id, -rdzv-id, -rdzv_id ID
                           TORCHELASTIC_RUN_ID of every attempt (default random)
  -spares N                the last N hosts of the list stand by (as do hosts
                           the placement leaves without ranks); a host whose
                           agent was lost, or whose rank's failure names the
                           node (SIGBUS, a GPU, ECC or InfiniBand error), is
                           left out of the next attempt and a spare takes its
                           place, ranks renumbered as placed afresh; so is a
                           host not reached at the start (nothing answered),
                           before any rank starts
  -hang-timeout SECONDS    when no rank printed anything for this long,
                           collect every rank's stacks (DIR/rank.R/stacks.txt
                           with -output-filename DIR, else a temporary
                           directory), name the odd ranks out, stop the job
                           and exit 124; -timeout and SIGUSR1 (which stops
                           nothing) collect them too
  -start-timeout SECONDS   wait this long for every agent (default 60); a
                           name that does not resolve fails at once (in
                           mpi-operator's launcher pod it is waited for)
  -unreachable-grace SECONDS
                           once every other host is ready, wait this long
                           (default 10) for hosts that refuse connections
                           or have no route, then fail naming them; 0, or
                           -start-timeout given without it, or
                           mpi-operator's hostfile: wait -start-timeout
  -tree-width K|auto       agents relay for each other: the launcher reaches
                           K hosts, each of those K more, and so on (auto:
                           flat below 256 hosts, else 32; 0: flat; 1: a
                           chain, for tests); default $GANGWAY_TREE_WIDTH,
                           else auto; --transport agent or slurm
  -dry-run                 print the placement and environments, start nothing
  -transport agent|ssh|slurm
                           agents on -port (default); 'agent --stdio'
                           started through the system ssh; or one
                           'agent --srun' per node started by one srun step
                           (the default inside a Slurm allocation, SLURM_JOB_ID,
                           when no -H or hostfile is given)
  -launcher, -bootstrap ssh|pdsh|slurm|openmpi
                           Hydra's, Intel MPI's and DeepSpeed's: -transport
                           ssh (ssh, pdsh) or slurm, or -mpi openmpi; mpich,
                           impi and mvapich are the default
  -p, -port N              agent port (default 22122; a Port in the ssh
                           config for the host wins over the default, -p and
                           host:slots:port win over it)
  -ssh-port, -ssh_port N   horovodrun's, DeepSpeed's: -p N; with -transport
                           ssh, ssh's -p N
  -agent-path PATH         agent binary on the hosts for -transport ssh, slurm
                           (a leading ~/ is the remote home); default for
                           ssh: agent in the remote PATH; for slurm: the
                           agent beside this launcher (as an absolute
                           path), else the agent in PATH
  -prefix DIR              mpirun's install prefix: -agent-path DIR/bin/agent
                           (unless -agent-path is given)
  -ssh COMMAND             ssh command line for -transport ssh (default ssh),
                           split with sh quoting rules; no shell runs it
  -i, -ssh-identity-file FILE
                           SSH identity, with FILE-cert.pub if there
                           (default: SSH_AUTH_SOCK, ~/.ssh/id_*); refused,
                           as ssh does, when group or others may read it
  -F FILE|none             ssh client config read instead of ~/.ssh/config
                           and /etc/ssh/ssh_config (default: both, as ssh):
                           Host aliases and patterns, HostName, Port, User,
                           IdentityFile, IdentitiesOnly, ProxyJump,
                           ConnectTimeout, StrictHostKeyChecking,
                           UserKnownHostsFile, ServerAliveInterval,
                           ServerAliveCountMax; Host and Match blocks (all,
                           host, originalhost, user, localuser, exec) as ssh
                           reads them; precedence: user@host:port in -H or
                           a hostfile, then flags, then the config, then
                           defaults
  -known-hosts FILE        default ~/.ssh/known_hosts; @cert-authority
                           lines trust agents' host certificates
  -accept-new-host-keys    record host keys seen for the first time
  -allow-run-as-root       accepted for mpirun compatibility
  -v, -verbose             verbose logs (hosts, connect times, placement,
                           network choice);  -log-format console|json
  -m, -module              PROGRAM is a Python module: python3 -m PROGRAM ARGS
                           (torchrun's, DeepSpeed's)
  -no_ssh_check            -preflight=false (DeepSpeed's)
  -version, -V             print the version, the commit it was built from,
                           the protocol version and the Go version
  -h, -help
  -completion bash|zsh     print a shell completion script, then exit
                           (first option only; source <(launcher -completion bash))

Options take one or two dashes. Everything after PROGRAM belongs to PROGRAM.
Other launchers' options not listed here are accepted or refused (naming
gangway's equivalent) as README's "Coming from another launcher" says.

Exit status: the first failing rank's exit code (128+N for signal N, the
code given to MPI_Abort; 1 for a code outside 1..255), 124 on -timeout or
-hang-timeout, 128+N when the launcher was stopped by signal N, 1 when
hosts could not be reached or refused the job, 2 for usage errors, 255
when an agent was lost mid-job.
`
