#!/bin/bash
# mpich-testsuite.sh: build a chosen subset of MPICH's own test suite
# (test/mpi of an MPICH source tree), run every chosen test under MPICH's
# mpiexec.hydra and under gangway's launcher, judge each run as MPICH's
# runtests does, and print one table. Not part of `make test`: the suite
# is not vendored; point the script at a source tree of the MPICH you run
# (Debian: `apt-get source mpich`, with a deb-src line).
#
#   examples/mpich-testsuite.sh -s ~/src/mpich-4.0.2 coll/allred spawn/namepub init
#
# A TEST is DIR/PROGRAM (every line of DIR's testlist that runs PROGRAM)
# or DIR (every line of DIR's testlist); with none, a quick subset. Each
# run gets what runtests gives it: the testlist's process count, args=
# and env= (the launcher gets env= with -x too, for agents on other
# hosts), MPIEXEC_TIMEOUT from timeLimit= (else $MPITEST_TIMEOUT, 180 s),
# stdout and stderr together. A run passes as runtests judges it: by
# default exit status 0, a " No Errors" line and no other output; with
# resultTest=TestStatus or TestErrFatal, a nonzero exit status. Lines with
# mpiexecarg= are listed, not run.
#
# Options and environment:
#   -s DIR    MPICH source tree (the one holding test/mpi/configure); $MPICH_SRC
#   -b DIR    build directory, configured once and reused
#             (default: $TMPDIR/gangway-mpich-tests)
#   -j N      parallel make jobs (default: the CPU count)
#   HYDRA          the reference launcher (default: mpiexec.hydra)
#   LAUNCHER       gangway's launcher (default: bin/launcher, else launcher on PATH)
#   LAUNCHER_ARGS  extra launcher options, e.g. "-H hostA:2,hostB:2 -i key"
#                  (the build directory must then be on a file system the
#                  hosts share, at the same path)
#   MPICC          the MPI compiler (default: mpicc.mpich)
#
# Exit status: 0 when every test has the same result under both
# launchers, 1 when some differ, 2 for a usage or build-setup error.
set -eu

src=${MPICH_SRC:-}
build=${TMPDIR:-/tmp}/gangway-mpich-tests
jobs=$(nproc 2>/dev/null || echo 2)
while getopts s:b:j:h opt; do
	case $opt in
	s) src=$OPTARG ;;
	b) build=$OPTARG ;;
	j) jobs=$OPTARG ;;
	*) sed -n '2,/^set -eu/p' "$0" | sed 's/^# \{0,1\}//;/^set -eu/d' >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))

die() { echo "mpich-testsuite: $*" >&2; exit 2; }
[ -n "$src" ] || die "no MPICH source tree (-s DIR or MPICH_SRC)"
src=$(cd "$src" && pwd) || die "cannot enter $src"
[ -x "$src/test/mpi/configure" ] || die "$src/test/mpi/configure not found: not an MPICH source tree"
hydra=${HYDRA:-mpiexec.hydra}
mpicc=${MPICC:-mpicc.mpich}
here=$(cd "$(dirname "$0")/.." && pwd)
launcher=${LAUNCHER:-}
if [ -z "$launcher" ]; then
	if [ -x "$here/bin/launcher" ]; then launcher=$here/bin/launcher; else launcher=launcher; fi
fi
read -r -a launcher_args <<<"${LAUNCHER_ARGS:-}"
command -v "$hydra" >/dev/null || die "$hydra not found (Debian: apt-get install mpich)"
command -v "$launcher" >/dev/null || die "$launcher not found (make build)"
command -v "$mpicc" >/dev/null || die "$mpicc not found (Debian: apt-get install libmpich-dev)"
[ $# -gt 0 ] || set -- init/version init/finalized init/exitst1 init/timeout attr/attrt comm/dup \
	coll/allred2 pt2pt/sendrecv2 spawn/namepub

# Configure once: C tests only, against the MPICH that $mpicc builds for.
mkdir -p "$build"
build=$(cd "$build" && pwd)
if [ ! -f "$build/config.status" ]; then
	echo "configuring $src/test/mpi in $build (once; log in $build/configure.log)" >&2
	(cd "$build" && "$src/test/mpi/configure" MPICC="$mpicc" CC="$mpicc" MPIEXEC="$hydra" \
		--disable-fortran --disable-cxx --disable-romio --disable-dtpools --disable-ft-tests \
		--disable-perftest >configure.log 2>&1) || die "configure failed; see $build/configure.log"
fi
make -s -C "$build/util" >"$build/util.log" 2>&1 || die "building test/mpi/util failed; see $build/util.log"

# testlist DIR prints DIR's testlist: the configured one, else the source's.
testlist() {
	local f
	for f in "$build/$1/testlist" "$src/test/mpi/$1/testlist"; do
		if [ -f "$f" ]; then cat "$f"; return 0; fi
	done
	return 1
}

# The chosen runs, one per line: DIR PROGRAM NP [key=value...]
runs=$(mktemp)
out=$(mktemp -d)
trap 'rm -rf "$runs" "$out"' EXIT
for t in "$@"; do
	dir=${t%%/*}
	prog=
	[ "$dir" = "$t" ] || prog=${t#*/}
	list=$(testlist "$dir") || die "no testlist in $dir"
	n=0
	while read -r name np rest; do
		case $name in '' | '#'* | '!'* | @*) continue ;; esac
		[ -z "$prog" ] || [ "$name" = "$prog" ] || continue
		[ -d "$src/test/mpi/$dir/$name" ] && continue # a subdirectory, not a program
		echo "$dir $name ${np:-1} $rest" >>"$runs"
		n=$((n + 1))
	done <<<"$list"
	[ $n -gt 0 ] || die "$t: not in $dir's testlist"
done

# Build every chosen program once.
declare -A built
while read -r dir name _; do
	[ -n "${built[$dir/$name]:-}" ] && continue
	if make -s -j"$jobs" -C "$build/$dir" "$name" >"$out/build-${dir}-$name.log" 2>&1; then
		built[$dir/$name]=yes
	else
		built[$dir/$name]=no
	fi
done <"$runs"

# judge OUTPUT STATUS RESULTTEST prints "pass" or why the run failed, as
# runtests judges it.
judge() {
	local output=$1 status=$2 kind=$3
	case $kind in
	TestStatus | TestErrFatal)
		if [ "$status" -ne 0 ]; then echo pass; else echo "FAIL(exit 0, want nonzero)"; fi
		return
		;;
	esac
	if grep -Evq '^[[:space:]]*(No [Ee]rrors|Test Passed)[[:space:]]*$' "$output"; then
		echo "FAIL(unexpected output)"
	elif ! grep -Eq '^[[:space:]]*No [Ee]rrors[[:space:]]*$' "$output"; then
		echo "FAIL(no \" No Errors\")"
	elif [ "$status" -ne 0 ]; then
		echo "FAIL(exit $status)"
	else
		echo pass
	fi
}

printf '%-34s %3s  %-28s %-28s %s\n' TEST NP "HYDRA ($hydra)" "GANGWAY" ""
same=0 differ=0 i=0
while read -r dir name np rest; do
	i=$((i + 1))
	args=() envs=() xenv=() kind=TestStatusNoErrors limit=${MPITEST_TIMEOUT:-180} skip=
	for kv in $rest; do
		case $kv in
		arg=*) args+=("${kv#arg=}") ;;
		env=*) envs+=("${kv#env=}") && xenv+=(-x "${kv#env=}") ;;
		resultTest=*) kind=${kv#resultTest=} ;;
		timeLimit=*) limit=${kv#timeLimit=} ;;
		mpiexecarg=*) skip="not run (mpiexecarg)" ;;
		esac
	done
	label="$dir/$name${args[*]:+ ${args[*]}}${envs[*]:+ (${#envs[@]} env)}"
	if [ "${built[$dir/$name]}" != yes ]; then
		h="build failed" g="build failed"
	elif [ -n "$skip" ]; then
		h=$skip g=$skip
	else
		cd "$build/$dir"
		set +e
		env MPIEXEC_TIMEOUT="$limit" "${envs[@]}" "$hydra" -n "$np" "./$name" "${args[@]}" </dev/null >"$out/$i.hydra" 2>&1
		hs=$?
		env MPIEXEC_TIMEOUT="$limit" "${envs[@]}" "$launcher" "${launcher_args[@]}" "${xenv[@]}" -np "$np" "./$name" "${args[@]}" </dev/null >"$out/$i.gangway" 2>&1
		gs=$?
		set -e
		cd - >/dev/null
		h=$(judge "$out/$i.hydra" $hs "$kind")
		g=$(judge "$out/$i.gangway" $gs "$kind")
	fi
	mark=
	if [ "$h" = "$g" ]; then same=$((same + 1)); else differ=$((differ + 1)) mark=DIFFERS; fi
	printf '%-34s %3s  %-28s %-28s %s\n' "$label" "$np" "$h" "$g" "$mark"
	if [ -n "$mark" ] && [ -f "$out/$i.gangway" ]; then
		sed 's/^/    gangway| /' "$out/$i.gangway" | tail -n 5
	fi
done <"$runs"
echo "$((same + differ)) runs: $same with the same result under both launchers, $differ differ"
[ "$differ" -eq 0 ]
