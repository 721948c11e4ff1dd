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
  -H, -host LIST           [user@]host[:slots[:port]],...  (repeated hosts add slots)
  -hostfile, -machinefile, -f FILE
                           Open MPI (host slots=N [max_slots=M] [port=P]),
                           MPICH (host:N) or PBS nodefile; when no hosts are
                           given, read in this order: mpi-operator's
                           hostfile ($OMPI_MCA_orte_default_hostfile,
                           $PRTE_MCA_prte_default_hostfile,
                           $I_MPI_HYDRA_HOST_FILE, $HYDRA_HOST_FILE),
                           Slurm's SLURM_JOB_NODELIST/SLURM_TASKS_PER_NODE
                           (the agents are then started with srun:
                           -transport slurm), $PBS_NODEFILE
  -np, -n N                number of ranks (default: every slot)
  -N, -npernode N          ranks per host
  -nproc-per-node, -nproc_per_node, -num_gpus N
                           torchrun's and DeepSpeed's ranks per host: N slots
                           on each host (locally: -np N)
  -nnodes, -num_nodes N    use the first N hosts (error if fewer); torchrun's
                           elastic MIN:MAX is refused (fixed size; see
                           -max-restarts)
  -standalone              this machine only (torchrun; ignores Slurm/PBS)
  -map-by slot|node|ppr:N:node|ppr:N:socket[:PE=n]
                           fill each host (default), deal round robin, or N
                           ranks per host or per socket (sockets from the
                           hosts' facts; binds each rank to its socket);
                           :PE=n binds each rank to n consecutive CPUs
                           (slot:PE=n, node:PE=n, ppr:N:node:PE=n)
  -rank-by slot|node       number a host's ranks consecutively, or round
                           robin over hosts (default: as -map-by deals them)
  -oversubscribe           allow more ranks than slots
  -nooversubscribe         accepted for mpirun: the default
  -gpus-per-rank K         CUDA_VISIBLE_DEVICES gets K GPUs per rank (default 1)
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
                           the CPUs of one socket (round robin)
  -report-bindings         print each rank's CPU binding

Network and node preparation:
  -network-interface, -network-interfaces NAME[,NAME]
                           force the data interface on every host
                           (default: per host, the interface its routes to
                           the other hosts use; sets NCCL_SOCKET_IFNAME,
                           GLOO_SOCKET_IFNAME, HOROVOD_GLOO_IFACE, NCCL_IB_HCA)
  -preflight=false         skip the check that every host reaches every other
                           host's agent before ranks start (multi-host jobs)
  -drop-caches[=1|2|3]     sync and drop page caches on every host first (3)
  -drop-caches-best-effort go on when a host may not drop its caches
  -inspect [-json] [-v]    print each host's facts and the environment the
                           launcher would set, then exit (NICs that are
                           down or have only link-local addresses are
                           listed with -v or -json)

Environment:
  -x NAME | NAME=VALUE | 'PREFIX*'   export to every rank (repeatable); an
                           unset NAME or a rank identity (RANK...) warns
  -env-file FILE           KEY=VALUE lines exported to every rank; as
                           DeepSpeed, ~/.deepspeed_env and then
                           ./.deepspeed_env ($DS_ENV_FILE names them) are
                           read first: -env-file and -x win over them
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
                           transport)
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
  -output-filename DIR     also write DIR/rank.R/stdout and stderr
  -output-from RANKS       console shows only these ranks (0,4-7)
  -stdin RANK|none         rank that gets the launcher's stdin (default 0)
  -merge-stderr-to-stdout  rank stderr goes to the launcher's stdout
  -display-map             print the placement table (as -dry-run's) on
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

Control:
  -timeout SECONDS         stop the job after this long (restarts included),
                           exit 124 (default: $MPIEXEC_TIMEOUT, as mpiexec);
                           the stacks, then the stop, take at most
                           -kill-grace each (+3s for hosts to confirm)
  -kill-grace DURATION     SIGTERM to SIGKILL delay when stopping (default 5s);
                           hosts that have not confirmed their ranks' end
                           -kill-grace + 3s after the stop are cut off
  -max-restarts N          after a rank failure or a lost agent, start the
                           whole gang again, up to N times (default 0); never
                           after a signal or -timeout
  -restart-backoff SECONDS wait before each restart (default 1)
  -run-id ID               TORCHELASTIC_RUN_ID of every attempt (default random)
  -hang-timeout SECONDS    when no rank printed anything for this long,
                           collect every rank's stacks (DIR/rank.R/stacks.txt
                           with -output-filename DIR, else a temporary
                           directory), name the odd ranks out, stop the job
                           and exit 124; -timeout and SIGUSR1 (which stops
                           nothing) collect them too
  -start-timeout SECONDS   wait this long for every agent (default 60); a
                           name that does not resolve fails at once
  -dry-run                 print the placement and environments, start nothing
  -transport agent|ssh|slurm
                           agents on -port (default); 'agent --stdio'
                           started through the system ssh; or one
                           'agent --srun' per node started by one srun step
                           (the default inside a Slurm allocation, SLURM_JOB_ID,
                           when no -H or hostfile is given)
  -p, -port N              agent port (default 22122)
  -agent-path PATH         agent binary on the hosts for -transport ssh, slurm
                           (a leading ~/ is the remote home)
  -prefix DIR              mpirun's install prefix: -agent-path DIR/bin/agent
                           (unless -agent-path is given)
  -ssh COMMAND             ssh command line for -transport ssh (default ssh),
                           split with sh quoting rules; no shell runs it
  -i FILE                  SSH identity, with FILE-cert.pub if there
                           (default: SSH_AUTH_SOCK, ~/.ssh/id_*); refused,
                           as ssh does, when group or others may read it
  -known-hosts FILE        default ~/.ssh/known_hosts; @cert-authority
                           lines trust agents' host certificates
  -accept-new-host-keys    record host keys seen for the first time
  -allow-run-as-root       accepted for mpirun compatibility
  -v                       verbose logs (hosts, connect times, placement,
                           network choice);  -log-format console|json
  -version, -h, -help
  -completion bash|zsh     print a shell completion script, then exit
                           (first option only; source <(launcher -completion bash))

Options take one or two dashes. Everything after PROGRAM belongs to PROGRAM.

Exit status: the first failing rank's exit code (128+N for signal N, the
code given to MPI_Abort; 1 for a code outside 1..255), 124 on -timeout or
-hang-timeout, 128+N when the launcher was stopped by signal N, 1 when
hosts could not be reached or refused the job, 2 for usage errors, 255
when an agent was lost mid-job.
`
