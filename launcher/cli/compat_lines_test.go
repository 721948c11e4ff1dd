package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/internal/textx"
)

// compatLine is another launcher's command line as users write it in
// their scripts, and what gangway must make of it: the facts it must
// give (want, "key=value; key=value", see describe), or the refusal it
// must print (refuse, a part of the message, which names gangway's
// equivalent).
type compatLine struct {
	src    string // where the line was published; "" for a line written for this test
	line   string // the command line, its launcher's name first
	want   string
	refuse string
}

// compatEnv is the launcher's environment for the lines: what -x NAME
// copies, and a Slurm allocation for the lines marked "slurm: ".
var compatEnv = map[string]string{
	"HOME": "/nonexistent", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "PATH": "/usr/bin:/bin", "DISPLAY": ":0",
}

var compatSlurm = map[string]string{
	"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "dgx[01-02]", "SLURM_TASKS_PER_NODE": "8(x2)",
}

// compatFiles are the hostfiles the lines name, written in the test's
// working directory.
var compatFiles = map[string]string{
	"hosts":       "node1 slots=4\nnode2 slots=4\n",
	"hostfile":    "node1 slots=4\nnode2 slots=4\n",
	"hosts.txt":   "node1 slots=4\nnode2 slots=4\n",
	"machinefile": "node1:4\nnode2:4\n",
	"nodefile":    "node1\nnode1\nnode2\nnode2\n", // a PBS nodefile
	"ds_hosts":    "worker-1 slots=4\nworker-2 slots=4\n",
}

// launcherWords are the words that name another launcher at the start
// of a line; the rest is gangway's command line.
var launcherWords = [][]string{
	{"python", "-m", "torch.distributed.launch"}, {"python", "-m", "torch.distributed.run"}, {"python3", "-m", "torch.distributed.run"},
	{"mpirun"}, {"mpiexec"}, {"mpiexec.hydra"}, {"horovodrun"}, {"torchrun"}, {"deepspeed"},
}

// compatLines: Open MPI 4 and 5 (mpirun), MPICH's Hydra and Intel MPI
// (mpiexec, mpiexec.hydra, Intel's mpirun), horovodrun, torchrun and
// python -m torch.distributed.launch/run, DeepSpeed's launcher, and
// Slurm-style host lists. Lines with a source are published lines (shell
// variables replaced by values); the others exercise one documented
// option each.
var compatLines = []compatLine{
	// Open MPI's mpirun.
	{"horovod docs/running.md (Open MPI example)", "mpirun -np 4 -H localhost:4 -bind-to none -map-by slot -x NCCL_DEBUG=INFO -x LD_LIBRARY_PATH -mca pml ob1 -mca btl ^openib python train.py",
		"np=4; hosts=localhost:4; bind=none; map=slot; env.NCCL_DEBUG=INFO; env.LD_LIBRARY_PATH=/usr/local/cuda/lib64; env.OMPI_MCA_pml=ob1; env.OMPI_MCA_btl=^openib; argv=python train.py", ""},
	{"horovod docs/running.md (Open MPI example)", "mpirun -np 16 -H server1:4,server2:4,server3:4,server4:4 -bind-to none -map-by slot -x NCCL_DEBUG=INFO -x LD_LIBRARY_PATH -mca pml ob1 -mca btl ^openib python train.py",
		"np=16; hosts=server1:4,server2:4,server3:4,server4:4; bind=none", ""},
	{"suquark/hoplite mpirun_pernode.sh", "mpirun --mca btl_tcp_if_include ens3 --map-by ppr:1:node -H a,b,c ./bench",
		"N=1; map=slot; hosts=a:1,b:1,c:1; env.OMPI_MCA_btl_tcp_if_include=ens3; argv=./bench", ""},
	{"blog.gitcode.com: Open MPI hostfile usage", "mpirun --hostfile hosts -np 2 -N 1 hostname", "np=2; N=1; hosts=node1:4,node2:4; argv=hostname", ""},
	{"blog.gitcode.com: Open MPI hostfile usage", "mpirun --hostfile hosts -np 2 --map-by ppr:1:node hostname", "np=2; N=1", ""},
	{"Leander-s/komnet task_93/pp_internode_1.sh", "mpirun --mca btl tcp,self -np 2 numactl --cpunodebind=1 ./build/pingpong_tests",
		"np=2; env.OMPI_MCA_btl=tcp,self; argv=numactl --cpunodebind=1 ./build/pingpong_tests", ""},
	{"aten2001/cs6210-project2 tests/mpi_test0_4nodes.sh", "mpirun --hostfile nodefile -np 4 ./mpi_test0 1 5", "np=4; hosts=node1:2,node2:2; argv=./mpi_test0 1 5", ""},
	{"nmge.tistory.com/207 (OpenMP + MPI binding)", "mpirun -np 4 --map-by ppr:1:numa:PE=16 --bind-to core --report-bindings ./lmp -sf omp -pk omp 16 -in in.benchmark",
		"", "NUMA nodes are not a placement unit here: -bind-to numa binds each rank to its GPU's NUMA node, -map-by ppr:N:socket places N ranks per socket"},
	{"published job script (Open MPI 1.8+ branch)", "mpirun -np 4 --bind-to core --map-by node:pe=2 --report-bindings ./Test 1.0e-2 5 10 2 3 4",
		"np=4; map=node; pe=2; bind=pe=2; report=true", ""},
	{"published job script (binding survey)", "mpiexec --report-bindings --oversubscribe -mca btl ^openib -n 6 --bind-to hwthread --map-by socket ./mpi_hello",
		"np=6; oversub=true; bind=hwthread; report=true; map=slot", ""},
	{"published job script (binding survey)", "mpiexec --report-bindings --oversubscribe -mca btl ^openib -n 6 --bind-to hwthread --map-by core ./mpi_hello", "bind=hwthread", ""},
	{"published job script (hybrid SpMV)", "mpiexec -n 8 --map-by ppr:2:node --bind-to core ./d2_SpMV", "np=8; N=2; bind=core", ""},
	{"published job script (salloc)", "slurm: mpirun --bind-to none -mca btl ^openib -npernode 1 ./main -v -n 3 4 4 4 -p",
		"N=1; bind=none; hosts=dgx01:8,dgx02:8; transport=slurm; argv=./main -v -n 3 4 4 4 -p", ""},
	{"published job script (numactl)", "mpirun --bind-to none -mca btl ^openib --host a0,a3,a4,a5 -npernode 1 numactl --physcpubind 0-63 ./main",
		"N=1; hosts=a0:1,a3:1,a4:1,a5:1; argv=numactl --physcpubind 0-63 ./main", ""},
	{"aws/sagemaker-training-toolkit src/sagemaker_training/mpi.py", "mpirun --host algo-1:8,algo-2:8 -np 16 --allow-run-as-root --display-map --tag-output -mca btl_tcp_if_include eth0 -mca oob_tcp_if_include eth0 -mca plm_rsh_no_tree_spawn 1 -bind-to none -map-by slot -mca pml ob1 -mca btl ^openib -mca orte_abort_on_non_zero_status 1 -mca btl_vader_single_copy_mechanism none -x NCCL_MIN_NRINGS=4 -x NCCL_SOCKET_IFNAME=eth0 -x NCCL_DEBUG=INFO python train.py",
		"np=16; hosts=algo-1:8,algo-2:8; display=true; tags=mpirun; env.OMPI_MCA_plm_rsh_no_tree_spawn=1; env.NCCL_SOCKET_IFNAME=eth0", ""},
	{"pidajay/tpu models/official/mnasnet/train.sh", "mpirun -np 8 -hostfile hosts.txt -mca plm_rsh_no_tree_spawn 1 -bind-to socket -map-by slot -x HOROVOD_HIERARCHICAL_ALLREDUCE=1 -x HOROVOD_FUSION_THRESHOLD=16777216 -x NCCL_MIN_NRINGS=4 -x LD_LIBRARY_PATH -x PATH -mca pml ob1 -mca btl ^openib -x NCCL_SOCKET_IFNAME=ens5 -mca btl_tcp_if_exclude lo,docker0 -x TF_CPP_MIN_LOG_LEVEL=0 python mnasnet_main_hvd.py --use_tpu=False",
		"np=8; bind=socket; env.HOROVOD_FUSION_THRESHOLD=16777216; env.PATH=/usr/bin:/bin; env.OMPI_MCA_btl_tcp_if_exclude=lo,docker0; argv=python mnasnet_main_hvd.py --use_tpu=False", ""},
	{"NVIDIA/nccl-tests README.md", "slurm: mpirun -np 16 -N 8 ./build/all_reduce_perf -b 8 -e 8G -f 2 -g 1", "np=16; N=8; argv=./build/all_reduce_perf -b 8 -e 8G -f 2 -g 1", ""},
	{"Open MPI 4.1 mpirun(1), -x", "mpirun -x DISPLAY -x OFILE=/tmp/out ./a.out", "env.DISPLAY=:0; env.OFILE=/tmp/out", ""},
	{"published script (code index excerpt, repository not named)", "mpirun --hostfile nodefile -np 28 ./hello", "np=28; hosts=node1:2,node2:2", ""},
	{"yukihirabayasi/2DFMM ver-c/sample_implement/src-MPI/Run-scripts/Bentley-run.sh", "mpirun -machinefile nodefile -np 80 ./a.out", "np=80; hosts=node1:2,node2:2", ""},
	{"RiyanshKarani011235/xtreme-cluster-working-directory test/submit_script.sh", "mpirun -machinefile nodefile -np 8 ./output", "np=8", ""},
	{"published script (code index excerpt, repository not named)", "mpirun -np 8 --hostfile nodefile ./main", "np=8; argv=./main", ""},
	{"published script (code index excerpt, repository not named)", "mpiexec --hostfile nodefile python example_dcinv.py", "np=0; hosts=node1:2,node2:2; argv=python example_dcinv.py", ""},
	{"", "mpirun -c 4 ./a.out", "np=4", ""},
	{"", "mpirun -V", "mode=version", ""},
	{"", "mpirun --version", "mode=version", ""},
	{"", "mpirun --map-by socket -np 4 ./a.out", "map=slot; bind=socket", ""},
	{"", "mpirun --map-by core -np 4 ./a.out", "map=slot; bind=core", ""},
	{"", "mpirun --map-by hwthread:PE=2 -np 4 ./a.out", "bind=pe=2", ""},
	{"", "mpirun --map-by numa -np 4 ./a.out", "", "-map-by: \"numa\" is not supported: NUMA nodes are not a placement unit here"},
	{"", "mpirun --map-by ppr:2:socket -np 4 ./a.out", "persocket=2; bind=socket:2", ""},
	{"", "mpirun --map-by ppr:1:numa -np 4 ./a.out", "", "-bind-to numa binds each rank to its GPU's NUMA node"},
	{"Open MPI 5 mpirun(1), --map-by ppr:N:resource:pe=n", "mpirun -n 16 --map-by ppr:8:node:pe=4 --bind-to core ./a.out", "np=16; N=8; pe=4; bind=pe=4", ""},
	{"", "mpirun -n 4 --output tag,timestamp --display map,bind ./a.out", "tags=mpirun; timestamp=true; display=true; report=true", ""},
	{"", "mpirun -n 4 --output merge-stderr-to-stdout,dir=logs ./a.out", "merge=true; dir=logs", ""},
	{"", "mpirun -n 4 --output file=out.txt ./a.out", "", "file= is not supported"},
	{"", "mpirun --map-by slot:OVERSUBSCRIBE -np 8 -H a:2 ./a.out", "oversub=true", ""},
	{"", "mpirun --map-by node:DISPLAY -np 2 -H a,b ./a.out", "map=node; display=true", ""},
	{"", "mpirun -np 4 --timestamp-output --tag-output ./a.out", "timestamp=true; tags=mpirun", ""},
	{"", "mpirun -np 8 --npernode 4 -machinefile machinefile ./a.out", "np=8; N=4; hosts=node1:4,node2:4", ""},
	{"", "mpirun -np 2 --bind-to core:overload-allowed ./a.out", "bind=core", ""},
	{"", "mpirun -np 2 --bind-to l3cache ./a.out", "", "-bind-to \"l3cache\" is not supported (use none, numa, core, hwthread or socket"},
	{"", "mpirun -pernode -H a,b ./a.out", "N=1", ""},
	{"", "mpirun -bynode -np 4 -H a:2,b:2 ./a.out", "map=node", ""},
	{"", "mpirun -np 4 --cpus-per-proc 2 --bind-to core ./a.out", "pe=2; bind=pe=2", ""},
	{"", "mpirun --nolocal -np 4 ./a.out", "", "--nolocal is mpirun's option, not gangway's: the hosts are exactly -H"},
	{"", "mpirun --prtemca plm_ssh_agent ssh -n 4 ./a.out", "", "the ranks' MCA parameters are -mca KEY VALUE"},
	{"", "mpirun --display-allocation -np 2 ./a.out", "", "--display-map prints the placement"},
	{"", "mpirun -np 2 --rank-by core ./a.out", "", "-rank-by \"core\" is not supported: use slot or node"},
	{"", "mpirun -np 4 --oversubscribe --allow-run-as-root -wdir /data ./a.out", "oversub=true; wdir=/data", ""},
	{"", "mpirun -np 4 --bind-to-core ./a.out", "", "--bind-to-core is mpirun's option, not gangway's: use -bind-to core"},
	{"", "mpirun -np 4 -rf rankfile ./a.out", "", "ranks are placed by -map-by and -rank-by"},
	{"", "mpirun -np 4 --noprefix ./a.out", "np=4", ""},
	// MPICH's Hydra (mpiexec, mpiexec.hydra) and Intel MPI (mpirun, Hydra).
	{"", "mpiexec -gpus-per-proc 2 -n 4 ./a.out", "gpusper=2", ""},
	{"", "mpirun -n 4 -s all ./a.out", "", "--stdin RANK|none"},
	{"published PBS script (Hydra binding survey)", "mpiexec -bind-to hwthread -map-by socket -np 4 -ppn 4 ./mpi_hello", "np=4; N=4; bind=hwthread", ""},
	{"published PBS script (Hydra binding survey)", "mpiexec -bind-to hwthread -map-by numa -np 4 -ppn 4 ./mpi_hello", "", "NUMA nodes are not a placement unit here"},
	{"published PBS script (Hydra binding survey)", "mpiexec -bind-to hwthread -map-by core -np 4 -ppn 4 ./mpi_hello", "bind=hwthread; N=4", ""},
	{"MPICH wiki, Using the Hydra Process Manager", "mpiexec -f machinefile -n 8 ./examples/cpi", "np=8; hosts=node1:4,node2:4", ""},
	{"published script (code index excerpt, repository not named)", "mpirun -n 2 -f hostfile -ppn 1 ./app --no-nodes=2", "np=2; N=1; hosts=node1:4,node2:4; argv=./app --no-nodes=2", ""},
	{"published script (code index excerpt, repository not named)", "mpiexec -f nodefile -np 16 ./Radiation", "np=16; hosts=node1:2,node2:2", ""},
	{"published script (code index excerpt, repository not named)", "mpirun -f hostfile -ppn 1 -n 1 ./app --no-nodes=2 : -n 1 ./app --no-nodes=2 --worker", "", "is mpirun's and Hydra's form for several programs in one job (MPMD)"},
	{"MPICH mpiexec(1), MPMD", "mpiexec -n 4 ocean : -n 8 air", "", "\"ocean\" ... : -n ... is mpirun's and Hydra's form"},
	{"", "mpiexec -n 2 -- sh -c 'echo $0' : -n", "argv=sh -c echo $0 : -n", ""},
	{"", "mpirun -n 2 ./tool --sep : --out x", "argv=./tool --sep : --out x", ""},
	{"", "mpiexec -n 4 -ppn 2 -hosts h1,h2 ./cpi", "np=4; N=2; hosts=h1:2,h2:2", ""},
	{"", "mpiexec -n 4 -hosts h1:2,h2:2 ./cpi", "hosts=h1:2,h2:2", ""},
	{"MPICH mpiexec(1), -l", "mpiexec -l -n 4 hostname", "tags=rank; np=4", ""},
	{"", "mpiexec -prepend-rank -n 2 ./a.out", "tags=rank", ""},
	{"", "mpiexec -iface eth0 -n 4 ./a.out", "iface=eth0", ""},
	{"", "mpiexec -bind-to core:2 -n 4 ./a.out", "pe=2; bind=pe=2", ""},
	{"", "mpiexec -bind-to socket -map-by core -n 4 ./a.out", "bind=socket", ""},
	{"", "mpiexec -launcher ssh -f hosts -n 8 ./a.out", "transport=ssh", ""},
	{"", "slurm: mpiexec -bootstrap slurm -n 16 ./a.out", "transport=slurm; hosts=dgx01:8,dgx02:8", ""},
	{"", "mpiexec -launcher fork -n 2 ./a.out", "", "-launcher \"fork\" is not supported: gangway reaches hosts through its agents"},
	{"", "mpiexec -launcher ssh --transport agent -f hosts -n 2 ./a.out", "", "-launcher ssh and --transport agent disagree"},
	{"", "slurm: mpiexec -rmk slurm -n 16 ./a.out", "np=16", ""},
	{"", "mpiexec -rmk lsf -n 16 ./a.out", "", "gangway reads the Slurm and PBS allocations itself"},
	{"", "mpiexec -configfile run.cfg", "", "-configfile is Hydra's option, not gangway's: gangway runs one program per job"},
	{"", "mpiexec -outfile-pattern out.%r -n 2 ./a.out", "", "per-rank files are --output-filename DIR"},
	{"", "mpiexec -n 4 -wdir /tmp -usize SYSTEM ./a.out", "wdir=/tmp", ""},
	{"", "mpiexec -ordered-output -n 2 ./a.out", "np=2", ""},
	{"Intel MPI developer guide, controlling process placement", "mpirun -n 4 -ppn 2 -f hostfile ./myprog", "np=4; N=2; hosts=node1:4,node2:4", ""},
	{"Intel MPI getting started", "mpirun -n 2 -ppn 1 -hosts node1,node2 ./testc", "np=2; N=1; hosts=node1:1,node2:1", ""},
	{"", "mpirun -n 4 -perhost 2 -hosts n1,n2 ./a.out", "N=2", ""},
	{"", "mpirun -n 4 -rr -hosts n1,n2 ./a.out", "map=node", ""},
	{"", "mpirun -print-rank-map -n 4 -ppn 2 -hosts n1,n2 ./a.out", "display=true", ""},
	{"", "mpirun -bootstrap ssh -n 4 -hosts n1,n2 ./a.out", "transport=ssh", ""},
	{"", "mpiexec.hydra -n 4 -ppn 2 -hosts n1,n2 -l ./a.out", "N=2; tags=rank", ""},
	{"", "mpirun -n 2 -ppn 1 -hosts n1,n2 -iface ib0 ./a.out", "iface=ib0", ""},
	{"", "mpiexec -n 4 -ppn 2 -N 3 -hosts n1,n2 ./a.out", "N=3", ""},
	// Slurm's and pdsh's host ranges in -H.
	{"", "mpirun -np 16 -H node[01-02]:8 ./build/all_reduce_perf -b 8 -e 128M", "np=16; hosts=node01:8,node02:8", ""},
	{"", "mpiexec -n 8 -ppn 4 -hosts gpu[1-2] ./a.out", "hosts=gpu1:4,gpu2:4; N=4", ""},
	{"", "horovodrun -np 8 -H worker-[0-1]:4 python train.py", "hosts=worker-0:4,worker-1:4", ""},
	{"", "mpirun -H r[1-2]n[1-2] -N 1 ./a.out", "hosts=r1n1:1,r1n2:1,r2n1:1,r2n2:1; N=1", ""},
	{"", "mpirun -H node[1-3,5 ./a.out", "", `-H entry 1 "node[1-3,5": bad host range: node list "node[1-3,5": missing "]"`},
	// horovodrun.
	{"horovod docs/running.rst", "horovodrun -np 4 -H localhost:4 python train.py", "np=4; hosts=localhost:4; argv=python train.py", ""},
	{"horovod docs/running.rst", "horovodrun -np 16 -H server1:4,server2:4,server3:4,server4:4 python train.py", "np=16", ""},
	{"tczhangzhi/pytorch-distributed start.sh", "horovodrun -np 4 -H localhost:4 --verbose python horovod_distributed.py", "verbose=true", ""},
	{"tencentyun/qcloud-documents mnist.tf2.4.0.horovod/start.sh", "horovodrun -np 8 -H 10.0.0.1:4,10.0.0.2:4 --network-interface eth0 python3 train.py --steps 10000 --batch-size 128",
		"iface=eth0; hosts=10.0.0.1:4,10.0.0.2:4; argv=python3 train.py --steps 10000 --batch-size 128", ""},
	{"dmlc/web-data gluoncv/logs/classification/imagenet/resnest50.sh", "horovodrun -np 64 --hostfile hosts python train_horovod.py --rec-train /media/ramdisk/ILSVRC2012/train.rec --model resnest50",
		"np=64; hosts=node1:4,node2:4", ""},
	{"dmlc/web-data gluoncv/logs/classification/imagenet/resnest101.sh", "horovodrun -np 64 --hostfile hosts python train_horovod.py --model resnest101 --lr 0.025 --num-epochs 270 --batch-size 64",
		"np=64; argv=python train_horovod.py --model resnest101 --lr 0.025 --num-epochs 270 --batch-size 64", ""},
	{"henryqin1997/Horovod-Pytorch-Elastic-ResNet50 run.sh", "horovodrun -np 8 --min-np 4 --max-np 8 --host-discovery-script discover_hosts.sh python3 train_resnet_imagenet.py --train-dir /workspace/data/ILSVRC/train",
		"", "--min-np is horovodrun's option, not gangway's: gangway runs a fixed-size gang"},
	{"published script (code index excerpt, repository not named)", "horovodrun -np 8 -H localhost:8 python train.py --data_type all --model_path logs --epochs 1000 --batch_size 16", "np=8; hosts=localhost:8", ""},
	{"published script (code index excerpt, repository not named)", "horovodrun -np 4 -H localhost:4 --verbose python ./train_seg_horovod.py", "verbose=true; argv=python ./train_seg_horovod.py", ""},
	{"published script (code index excerpt, repository not named)", "horovodrun -np 1 -H localhost:1 python3 train_mem_model.py", "np=1; hosts=localhost:1", ""},
	{"published script (code index excerpt, repository not named)", "horovodrun -np 8 -H server1:4,server2:4 python3 train_mem_model.py", "np=8; hosts=server1:4,server2:4", ""},
	{"pyro-ppl/pyro docs: distributed training via Horovod", "horovodrun -np 2 examples/svi_horovod.py", "np=2; argv=examples/svi_horovod.py", ""},
	{"", "horovodrun --num-proc 2 --start-timeout 600 python train.py", "np=2; starttimeout=10m0s", ""},
	{"", "horovodrun --gloo -np 4 -H a:2,b:2 python train.py", "", "--gloo is horovodrun's option, not gangway's: gangway serves no Horovod Gloo rendezvous"},
	{"", "horovodrun -np 4 -H a:2,b:2 -p 12345 python train.py", "port=12345", ""},
	{"", "horovodrun -np 4 -H a:2,b:2 --ssh-port 2222 --ssh-identity-file /root/.ssh/id_rsa python train.py", "port=2222; identity=/root/.ssh/id_rsa", ""},
	{"", "horovodrun -np 4 -H a:2,b:2 --ssh-port 2222 -p 22122 python train.py", "", "--ssh-port 2222 and -p 22122 disagree"},
	{"", "horovodrun -np 4 --timeline-filename /tmp/timeline.json --timeline-mark-cycles python train.py", "env.HOROVOD_TIMELINE=/tmp/timeline.json; env.HOROVOD_TIMELINE_MARK_CYCLES=1; argv=python train.py", ""},
	{"", "horovodrun -np 4 --fusion-threshold-mb 32 python train.py", "env.HOROVOD_FUSION_THRESHOLD=33554432", ""},
	{"", "horovodrun -np 16 -H a:8,b:8 --fusion-threshold-mb=64 --cycle-time-ms 2.5 --cache-capacity 2048 --hierarchical-allreduce --no-hierarchical-allgather python train.py",
		"env.HOROVOD_FUSION_THRESHOLD=67108864; env.HOROVOD_CYCLE_TIME=2.5; env.HOROVOD_CACHE_CAPACITY=2048; env.HOROVOD_HIERARCHICAL_ALLREDUCE=1; env.HOROVOD_HIERARCHICAL_ALLGATHER=0", ""},
	{"", "horovodrun -np 4 --autotune --autotune-log-file /tmp/at.csv --autotune-gaussian-process-noise 0.8 --log-level debug --tcp python train.py",
		"env.HOROVOD_AUTOTUNE=1; env.HOROVOD_AUTOTUNE_LOG=/tmp/at.csv; env.HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE=0.8; env.HOROVOD_LOG_LEVEL=DEBUG; env.NCCL_IB_DISABLE=1", ""},
	{"", "horovodrun -np 4 --fusion-threshold-mb -1 python train.py", "", `--fusion-threshold-mb (horovodrun's option): "-1": want a whole number >= 0 (sets HOROVOD_FUSION_THRESHOLD)`},
	{"", "horovodrun -np 4 --autotune-gaussian-process-noise 2 python train.py", "", `"2": want a number from 0 to 1`},
	{"", "horovodrun -np 4 --log-level chatty python train.py", "", "want one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL"},
	{"", "horovodrun -np 4 --autotune=yes python train.py", "", "--autotune=yes (horovodrun's option) takes no value"},
	{"", "horovodrun -np 4 -H a:2,b:2 --prefix-output-with-timestamp python train.py", "timestamp=true", ""},
	{"", "horovodrun --mpi -np 4 -H a:2,b:2 python train.py", "pmi=true; np=4", ""},
	{"", "horovodrun -np 4 --min-np 2 --max-np 8 --host-discovery-script ./discover.sh python train.py", "", "gangway runs a fixed-size gang, restarted whole with --max-restarts"},
	{"", "horovodrun -np 8 --network-interfaces eth0,eth1 -H a:4,b:4 python train.py", "iface=eth0,eth1", ""},
	{"", "horovodrun -np 4 --output-filename logs -H a:2,b:2 python train.py", "dir=logs", ""},
	{"", "horovodrun -np 4 --disable-cache -H a:2,b:2 python train.py", "np=4", ""},
	{"", "horovodrun -np 4 --nics eth0 python train.py", "iface=eth0", ""},
	{"", "horovodrun -np 4 --no-stall-check --stall-check-warning-time-seconds 120 python train.py", "env.HOROVOD_STALL_CHECK_DISABLE=1; env.HOROVOD_STALL_CHECK_TIME_SECONDS=120", ""},
	// torchrun and python -m torch.distributed.launch/run.
	{"pytorch docs/source/elastic/quickstart.rst", "slurm: torchrun --nnodes=2 --nproc_per_node=4 --max_restarts=3 --rdzv_id=456 --rdzv_backend=c10d --rdzv_endpoint=dgx01:29400 train.py --arg1",
		"hosts=dgx01:4,dgx02:4; restarts=3; runid=456; masteraddr=; warn=--rdzv-endpoint is not used: gangway is the rendezvous; argv=train.py --arg1", ""},
	{"eesungkim.com notes/ml-engineering/training/torchrun", "torchrun --standalone --nproc-per-node=4 train.py", "np=4; hosts=local", ""},
	{"eesungkim.com notes/ml-engineering/training/torchrun", "torchrun --nnodes=2 --nproc-per-node=4 --rdzv-id=job42 --rdzv-backend=c10d --rdzv-endpoint=10.0.0.1:29500 --node-rank=0 train.py",
		"", "--node-rank=0 is torchrun's and DeepSpeed's option, not gangway's: gangway starts every host's ranks from one command on one machine"},
	{"eesungkim.com notes/ml-engineering/training/torchrun", "torchrun --nnodes=2:4 --nproc-per-node=4 --max-restarts=3 --rdzv-id=job42 --rdzv-backend=c10d --rdzv-endpoint=10.0.0.1:29500 train.py",
		"", "elastic sizes are not supported; gangway runs a fixed-size gang"},
	{"tczhangzhi/pytorch-distributed start.sh", "python -m torch.distributed.launch --nproc_per_node=4 distributed.py", "np=4; argv=distributed.py", ""},
	{"tangjzh/LAH train.sh", "torchrun --nproc_per_node=8 train.py", "np=8; hosts=local; argv=train.py", ""},
	{"sridharakella/Vmware-VRX-NSX-Vcenter GPUS-Kubernetes/torch-demo-main/launcher.sh", "torchrun --nproc_per_node=4 --nnodes=2 --node_rank=0 --master_addr=10.0.0.1 --master_port=29500 ./main.py",
		"", "--node_rank=0 is torchrun's and DeepSpeed's option, not gangway's"},
	{"yukiman76/LLM base/llmfs/train_ddp.sh", "slurm: torchrun --nnodes=2 --nproc_per_node=8 --rdzv_id=100 --rdzv_backend=c10d --rdzv_endpoint=localhost:29400 llfs_train.py",
		"hosts=dgx01:8,dgx02:8; runid=100; warn=--rdzv-endpoint is not used", ""},
	{"RoversCode/so-vits-svc scripts/train.sh", "torchrun --nproc_per_node=7 --master_port=6789 --master_addr=localhost train.py", "np=7; masterport=6789; masteraddr=localhost", ""},
	{"published script (code index excerpt, repository not named)", "torchrun --standalone --nnodes 1 --nproc_per_node 4 --node_rank 0 --master_addr 10.0.0.1 --master_port 7000 train.py -np 4 -n 1", "", "--node_rank is torchrun's and DeepSpeed's option"},
	{"published script (code index excerpt, repository not named)", "torchrun --nnodes=1 --nproc_per_node=1 --rdzv_id=100 --rdzv_backend=c10d --rdzv_endpoint=localhost:12356 train.py", "np=1; runid=100", ""},
	{"published script (code index excerpt, repository not named)", "python -m torch.distributed.launch --nproc_per_node=8 --master_port=29500 --nnodes=1 --node_rank=0 --master_addr=127.0.0.1 tools/train.py cfg.py --launcher pytorch", "", "--node_rank=0 is torchrun's"},
	{"published script (code index excerpt, repository not named)", "torchrun --nproc_per_node=8 --nnodes=1 --master_addr=127.0.0.1 --master_port=29500 scripts/train.py cfg.py --launcher pytorch",
		"np=8; masteraddr=127.0.0.1; argv=scripts/train.py cfg.py --launcher pytorch", ""},
	{"published script (code index excerpt, repository not named)", "torchrun --nproc_per_node=4 train.py --lr 1e-4", "np=4; argv=train.py --lr 1e-4", ""},
	{"", "torchrun --nproc_per_node gpu train.py", "facts=gpu; hosts=local", ""},
	{"", "python -m torch.distributed.launch --nproc_per_node=4 --use_env train.py", "np=4; argv=train.py", ""},
	{"", "torchrun --nproc_per_node=2 -t 3 --start_method spawn train.py", "np=2; argv=train.py", ""},
	{"", "torchrun --nproc_per_node=2 --local-ranks-filter 0 train.py", "", "--output-from RANKS"},
	{"", "slurm: torchrun --nnodes 2 --nproc-per-node=auto train.py", "facts=auto; hosts=dgx01:8,dgx02:8", ""},
	{"", "python3 -m torch.distributed.run --nproc-per-node cpu train.py", "facts=cpu", ""},
	{"", "torchrun --nproc_per_node=8 -m pkg.train --lr 0.1", "np=8; argv=python3 -m pkg.train --lr 0.1", ""},
	{"", "torchrun --standalone --nproc_per_node=2 --no-python ./a.out", "np=2; argv=./a.out", ""},
	{"", "torchrun --nproc_per_node=4 --log_dir logs --tee 3 train.py", "dir=logs", ""},
	{"", "torchrun --nproc_per_node=4 --log-dir logs --redirects 3 train.py", "", "--output-filename DIR (--log-dir) also writes"},
	{"", "torchrun --nnodes 1 --nproc_per_node 2 --rdzv_backend etcd --rdzv_endpoint etcd:2379 train.py", "", "--rdzv_backend etcd is torchrun's option, not gangway's: gangway is the rendezvous"},
	{"", "torchrun --nproc_per_node=2 --master_addr=127.0.0.1 --master_port=29501 train.py", "masteraddr=127.0.0.1; masterport=29501", ""},
	{"", "torchrun --nproc_per_node=2 --rdzv_conf join_timeout=900 train.py", "", "the wait for the hosts is --start-timeout"},
	{"", "torchrun --nproc_per_node=2 --monitor_interval 1 train.py", "warn=--monitor-interval is not used", ""},
	{"", "torchrun --nproc_per_node=two train.py", "", "--nproc-per-node two: want 1 to"},
	// DeepSpeed's launcher.
	{"miaokee.com/2780555.html (DeepSpeed multi-node)", "deepspeed --num_gpus=4 --master_addr=192.168.1.1 --master_port=29500 --node_rank=1 train.py", "", "--node_rank=1 is torchrun's and DeepSpeed's option, not gangway's"},
	{"miaokee.com/2780555.html (DeepSpeed multi-node)", "deepspeed --hostfile=hostfile train.py", "hosts=node1:4,node2:4; argv=train.py", ""},
	{"DeepSpeed docs, getting started: resource configuration", "deepspeed --include=worker-2:0,1 --hostfile ds_hosts train.py --deepspeed --deepspeed_config ds_config.json",
		"hosts=worker-2:2; argv=train.py --deepspeed --deepspeed_config ds_config.json", ""},
	{"DeepSpeed docs, getting started: resource configuration", "deepspeed --exclude=worker-1:0 --hostfile ds_hosts train.py", "hosts=worker-1:3,worker-2:4", ""},
	{"akibjawad/train_gpt ds_run.sh", "deepspeed --num_gpus 4 ds_train.py --deepspeed --deepspeed_config ds_config.yml --block_size 1024 --pipeline_parallel_size 2 --eval_steps 10",
		"np=4; argv=ds_train.py --deepspeed --deepspeed_config ds_config.yml --block_size 1024 --pipeline_parallel_size 2 --eval_steps 10", ""},
	{"brynelee/deepspeedtrial deepspeed_train_demo/cmd_demos.sh", "deepspeed ds_train.py --epoch 1 --deepspeed --deepspeed_config ds_config.json", "hosts=local; argv=ds_train.py --epoch 1 --deepspeed --deepspeed_config ds_config.json", ""},
	{"brynelee/deepspeedtrial deepspeed_train_demo/cmd_demos.sh", "deepspeed --hostfile hostfile ds_train.py --epoch 1 --deepspeed --deepspeed_config ds_config.json", "hosts=node1:4,node2:4", ""},
	{"bigohofone/assignment1-basics-solution cs336_basics/scripts/ts_train_model.sh", "deepspeed --num_gpus=8 ./cs336_basics/solutions/_train_model.py --ds_config_path ./cs336_basics/configs/ds_config.json --lr 6e-4", "np=8", ""},
	{"randydl/LLaMA-Factory run_ds.sh", "deepspeed --num_gpus 8 --num_nodes 2 --hostfile hostfile --master_addr 10.252.32.12 randy/train.py", "hosts=node1:8,node2:8; masteraddr=10.252.32.12; argv=randy/train.py", ""},
	{"published script (code index excerpt, repository not named)", "deepspeed --num_gpus=8 train.py --deepspeed --deepspeed_config ds_config.json --pipeline --pipeline_spec_layers", "np=8", ""},
	{"published script (code index excerpt, repository not named)", "deepspeed --num_nodes 1 --num_gpus 8 train.py --lr 1e-4 --deepspeed --deepspeed_config deepspeed_config/config.json", "np=8; hosts=local", ""},
	{"published script (code index excerpt, repository not named)", "deepspeed --num_gpus=4 1.py --deepspeed ds_config.json --bf16 --do_train", "np=4; argv=1.py --deepspeed ds_config.json --bf16 --do_train", ""},
	{"", "deepspeed --num_nodes 1 --num_gpus 2 --hostfile ds_hosts train.py", "hosts=worker-1:2", ""},
	{"", "deepspeed --hostfile ds_hosts --launcher openmpi train.py", "mode=openmpi", ""},
	{"", "deepspeed --hostfile ds_hosts --launcher pdsh --ssh_port 2222 train.py", "transport=ssh; ssh=ssh -p 2222", ""},
	{"", "deepspeed --hostfile ds_hosts --launcher mvapich train.py", "transport=agent; pmi=true", ""},
	{"", "deepspeed --num_gpus 2 --module pkg.train", "argv=python3 -m pkg.train", ""},
	{"", "deepspeed --hostfile ds_hosts --no_ssh_check --force_multi --no_local_rank --no_python ./train", "preflight=false; argv=./train", ""},
	{"", "deepspeed --num_gpus 4 --enable_each_rank_log logs train.py", "dir=logs", ""},
	{"", "deepspeed --bind_cores_to_rank --num_gpus 4 train.py", "", "bind each rank to N CPUs with -map-by slot:PE=N"},
	{"", "deepspeed --hostfile ds_hosts --launcher_args=-x train.py", "", "gangway's transport takes no extra arguments"},
}

// describe is the facts of a parsed command line a compatLine's want
// names; env.NAME is a variable every rank gets (-x, -mca).
func describe(c Config) map[string]string {
	m := map[string]string{
		"np": strconv.Itoa(c.Place.NP), "N": strconv.Itoa(c.Place.NPerNode), "map": c.Place.MapBy,
		"bind": c.Place.BindSpec(), "pe": strconv.Itoa(c.Place.PE), "persocket": strconv.Itoa(c.Place.PerSocket),
		"facts": c.Place.FactSlots, "oversub": strconv.FormatBool(c.Place.Oversubscribe), "gpusper": strconv.Itoa(c.Place.GPUsPer),
		"tags": c.Out.Tags.String(), "timestamp": strconv.FormatBool(c.Out.Timestamp), "dir": c.Out.Dir,
		"display": strconv.FormatBool(c.Out.DisplayMap), "report": strconv.FormatBool(c.Out.ReportBindings),
		"merge": strconv.FormatBool(c.Out.MergeStderr), "verbose": strconv.FormatBool(c.Out.Verbose),
		"transport": string(c.Transport.Kind), "port": strconv.Itoa(c.Transport.Port), "ssh": c.Transport.SSHCommand,
		"identity": c.Transport.Identity, "starttimeout": c.Transport.StartTimeout.String(),
		"iface": c.Network.Interface, "preflight": strconv.FormatBool(c.Network.Preflight),
		"restarts": strconv.Itoa(c.Control.MaxRestarts), "runid": c.Control.RunID,
		"masteraddr": c.Env.MasterAddr, "masterport": strconv.Itoa(c.Env.MasterPort), "wdir": c.Env.Dir,
		"forward": [...]string{ForwardAll: "all", ForwardNone: "none", ForwardList: "list"}[c.Env.Forward], "forwardlist": strings.Join(c.Env.ForwardList, ","),
		"pmi": strconv.FormatBool(c.Env.PMI), "argv": strings.Join(c.Argv, " "), "warn": strings.Join(c.Env.Warnings, "\n"),
	}
	var hs []string
	for _, h := range c.Place.Hosts {
		hs = append(hs, h.Name+":"+strconv.Itoa(h.Slots))
	}
	m["hosts"] = strings.Join(hs, ",")
	if c.Place.Source == HostsLocal {
		m["hosts"] = "local"
	}
	m["mode"] = map[Mode]string{ModeRun: "run", ModeOpenMPI: "openmpi", ModeDryRun: "dry-run", ModeVersion: "version", ModeHelp: "help"}[c.Mode]
	for k, v := range c.Env.Vars {
		m["env."+k] = v
	}
	for _, kv := range c.Env.MCA {
		k, v, _ := strings.Cut(kv, "=")
		m["env."+k] = v
	}
	return m
}

// compatArgs splits a line as sh would and drops its launcher's name;
// "slurm: " in front runs it inside compatSlurm's allocation.
func compatArgs(t *testing.T, line string) (args []string, env map[string]string) {
	env = map[string]string{}
	for k, v := range compatEnv {
		env[k] = v
	}
	if rest, ok := strings.CutPrefix(line, "slurm: "); ok {
		line = rest
		for k, v := range compatSlurm {
			env[k] = v
		}
	}
	words, err := textx.SplitShell(line)
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	for _, l := range launcherWords {
		if len(words) >= len(l) && slices.Equal(words[:len(l)], l) {
			return words[len(l):], env
		}
	}
	t.Fatalf("%q: no launcher name first", line)
	return nil, nil
}

// checkCompatLines parses each line in a directory holding compatFiles
// and checks what it gives.
func checkCompatLines(t *testing.T, lines []compatLine) {
	// The Slurm lines' agent: the one beside the launcher, as installed.
	defer func(old func() (string, error)) { findAgent = old }(findAgent)
	findAgent = func() (string, error) { return "/opt/gangway/bin/agent", nil }
	dir := t.TempDir()
	for name, text := range compatFiles {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	for i, l := range lines {
		t.Run(fmt.Sprintf("%d", i), func(t *testing.T) {
			args, env := compatArgs(t, l.line)
			getenv, environ := fakeEnv(env)
			c, err := Parse(args, getenv, environ)
			if l.refuse != "" {
				switch {
				case err == nil:
					t.Fatalf("%s\n  accepted; want a refusal containing %q", l.line, l.refuse)
				case !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), l.refuse):
					t.Fatalf("%s\n  = %v\n  want a usage error containing %q", l.line, err, l.refuse)
				case strings.Contains(err.Error(), "did you mean"):
					t.Fatalf("%s\n  = %v: offers another flag", l.line, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s\n  = %v", l.line, err)
			}
			got := describe(c)
			for _, kv := range strings.Split(l.want, "; ") {
				k, v, _ := strings.Cut(kv, "=")
				g, ok := got[k]
				switch {
				case !ok:
					t.Errorf("%s\n  has no %s (want %q)", l.line, k, v)
				case k == "warn" && (v == "" && g != "" || !strings.Contains(g, v)):
					t.Errorf("%s\n  warnings %q, want one containing %q", l.line, g, v)
				case k != "warn" && g != v:
					t.Errorf("%s\n  %s = %q, want %q", l.line, k, g, v)
				}
			}
		})
	}
}

// TestCompatLines: each of the other launchers' command lines is
// accepted with its meaning or refused naming gangway's equivalent.
func TestCompatLines(t *testing.T) {
	if len(compatLines) < 80 {
		t.Errorf("%d lines; the table keeps at least 80", len(compatLines))
	}
	checkCompatLines(t, compatLines)
}

// TestForeignFlagsNeverSuggest: another launcher's option gangway knows
// gets its own message (or is accepted), never "did you mean" another
// flag; one-letter options are offered only the same letter.
func TestForeignFlagsNeverSuggest(t *testing.T) {
	names := make([]string, 0, len(foreignFlags))
	for n := range foreignFlags {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, args := range [][]string{{"--" + n, "v1", "v2", "prog"}, {"-" + n + "=v", "prog"}} {
			_, err := Parse(args, func(string) string { return "" }, nil)
			if err != nil && strings.Contains(err.Error(), "did you mean") {
				t.Errorf("Parse(%q) = %v", args, err)
			}
		}
	}
	for _, tc := range []struct{ arg, want string }{
		{"-Z", "unknown option -Z (see launcher -h)"},
		{"-P", "unknown option -P: did you mean -p?"},
		{"-nq", "unknown option -nq: did you mean -np?"},
	} {
		_, err := Parse([]string{tc.arg, "prog"}, func(string) string { return "" }, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want %q", tc.arg, err, tc.want)
		}
	}
}
