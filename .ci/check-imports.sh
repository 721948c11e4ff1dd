#!/bin/sh
# Imports point one way (see docs/architecture.md): the packages under
# internal/ import no gangway package; the other leaf packages import none
# but those; the launcher's packages import only agent/wire of the agent's
# packages, and their rooms point one way (plan at the bottom, the root
# package's modes at the top; the table below); the agent's packages
# import only each other; launcher and agent may also use
# gangway/internal/... packages; of the agent's two rooms, the SSH server
# (agent/sshd) and the launcher session (agent) import neither the other,
# only what both speak of (agent/account, which imports only agent/proc)
# and the leaves; nothing imports cmd/; and nothing under agent/,
# hostfile/, nccl/ or bench/ reaches the launcher or cmd/, not even in
# tests.
set -eu
cd "$(dirname "$0")/.."
# The module path shortened to "gangway" in go list's output, so the
# patterns below read as the tree does; go list's status is kept.
module=$(go list -m)
golist() {
	out=$(command go list "$@") && rc=0 || rc=$?
	printf '%s\n' "$out" | sed "s#$module/#gangway/#g; s#$module\$#gangway#; s#$module #gangway #g"
	return $rc
}
fail=0
# A package that does not load (an import cycle, a forbidden internal
# import) fails the check; golist -e below still reports its imports.
golist -deps -test ./... >/dev/null || fail=1
deps() { golist -e -f '{{join .Imports "\n"}}' "$1" | grep '^gangway' || true; }
internal='^gangway/internal/'

for pkg in $(golist -e ./... | grep "$internal" || true); do
	bad=$(deps "$pkg")
	if [ -n "$bad" ]; then echo "$pkg must not import: $bad"; fail=1; fi
done
for leaf in ./hostfile ./nccl ./bench ./agent/wire ./agent/proc ./agent/pmi; do
	bad=$(deps "$leaf" | grep -v "$internal" || true)
	if [ -n "$bad" ]; then echo "$leaf must not import: $bad"; fail=1; fi
done

for p in $(golist -e ./launcher/...); do
	bad=$(deps "$p" | grep -v -e '^gangway/launcher$' -e '^gangway/launcher/' -e '^gangway/agent/wire$' -e '^gangway/hostfile$' -e '^gangway/nccl$' -e '^gangway/bench$' -e "$internal" || true)
	if [ -n "$bad" ]; then echo "$p must import only launcher/..., agent/wire, hostfile, nccl, bench, internal/...; it imports: $bad"; fail=1; fi
done

# The launcher's rooms point one way (each package's doc says what it may
# import): a room may import only the rooms named after it, never the
# launcher's root package (Main and the modes), which alone may import
# them all; every package under launcher/ is a room here. Tests included:
# a room's tests do not reach up either.
rooms='
plan:
transport: plan
cli: plan transport
diagnose: plan cli
rankenv: plan cli
selftest:
health:
engine: plan cli transport diagnose rankenv selftest health
'
alldeps() {
	golist -e -f '{{join .Imports "\n"}}
{{join .TestImports "\n"}}
{{join .XTestImports "\n"}}' "$1" | grep -e '^gangway/launcher/' -e '^gangway/launcher$' | sort -u || true
}
for p in $(golist -e ./launcher/... | grep '^gangway/launcher/'); do
	name=${p#gangway/launcher/}
	line=$(echo "$rooms" | grep "^$name:" || true)
	if [ -z "$line" ]; then
		echo "$p is not a room in .ci/check-imports.sh: add it, with the rooms it may import"; fail=1; continue
	fi
	allowed=" ${line#*:} "
	for dep in $(alldeps "$p"); do
		d=${dep#gangway/launcher/}
		[ "$d" = "$name" ] && continue
		case "$allowed" in *" $d "*) continue ;; esac
		list=$(echo $allowed)
		echo "$p must not import $dep (it may import: ${list:-no other launcher package})"
		fail=1
	done
done

for p in $(golist -e ./agent/...); do
	bad=$(deps "$p" | grep -v -e '^gangway/agent$' -e '^gangway/agent/' -e "$internal" || true)
	if [ -n "$bad" ]; then echo "$p must import only agent/... and internal/...; it imports: $bad"; fail=1; fi
done

bad=$(deps ./agent/sshd | grep -x 'gangway/agent' || true)
if [ -n "$bad" ]; then echo "./agent/sshd (the SSH server) must not import the launcher session: $bad"; fail=1; fi
bad=$(deps ./agent | grep -x 'gangway/agent/sshd' || true)
if [ -n "$bad" ]; then echo "./agent (the launcher session) must not import the SSH server: $bad"; fail=1; fi
bad=$(deps ./agent/account | grep -v -e '^gangway/agent/proc$' -e "$internal" || true)
if [ -n "$bad" ]; then echo "./agent/account must import only agent/proc and internal/...; it imports: $bad"; fail=1; fi

bad=$(golist -e -f '{{.ImportPath}}: {{join .Imports " "}}' ./... | grep -v '^gangway/cmd/' | grep 'gangway/cmd/' || true)
if [ -n "$bad" ]; then echo "cmd/ is imported by: $bad"; fail=1; fi

# Tests included: -deps -test lists everything a package's tests build.
for p in $(golist -e ./agent/... ./hostfile/... ./nccl/... ./bench/...); do
	bad=$(golist -e -deps -test "$p" | grep -E '^gangway/(launcher(/[^ ]+)?|cmd/[^ ]+)( |$)' | cut -d' ' -f1 | sort -u || true)
	if [ -n "$bad" ]; then
		via=$(golist -e -deps -test -f '{{.ImportPath}}: {{join .Imports " "}}' "$p" |
			grep -E ' gangway/(launcher(/[^ ]+)?|cmd/[^ ]+)( |$)' | cut -d: -f1 | tr '\n' ' ')
		echo "$p (with its tests) must not reach $(echo $bad); imported by: $via"
		fail=1
	fi
done
exit $fail
