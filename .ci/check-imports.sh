#!/bin/sh
# Imports point one way (see README "How it works"): the packages under
# internal/ import no gangway package; the other leaf packages import none
# but those; launcher imports only agent/wire of the agent's packages; the
# agent's packages import only each other; launcher and agent may also use
# gangway/internal/... packages;
# nothing imports cmd/; and nothing under agent/, hostfile/, nccl/ or bench/
# reaches the launcher or cmd/, not even in tests.
set -eu
cd "$(dirname "$0")/.."
fail=0
# A package that does not load (an import cycle, a forbidden internal
# import) fails the check; go list -e below still reports its imports.
go list -deps -test ./... >/dev/null || fail=1
deps() { go list -e -f '{{join .Imports "\n"}}' "$1" | grep '^gangway' || true; }
internal='^gangway/internal/'

for pkg in $(go list -e ./... | grep "$internal" || true); do
	bad=$(deps "$pkg")
	if [ -n "$bad" ]; then echo "$pkg must not import: $bad"; fail=1; fi
done
for leaf in ./hostfile ./nccl ./bench ./agent/wire ./agent/proc ./agent/pmi; do
	bad=$(deps "$leaf" | grep -v "$internal" || true)
	if [ -n "$bad" ]; then echo "$leaf must not import: $bad"; fail=1; fi
done

for p in $(go list -e ./launcher/...); do
	bad=$(deps "$p" | grep -v -e '^gangway/launcher$' -e '^gangway/launcher/' -e '^gangway/agent/wire$' -e '^gangway/hostfile$' -e '^gangway/nccl$' -e '^gangway/bench$' -e "$internal" || true)
	if [ -n "$bad" ]; then echo "$p must import only launcher/..., agent/wire, hostfile, nccl, bench, internal/...; it imports: $bad"; fail=1; fi
done

# The launcher's rooms point one way (see each package's doc): a room may
# import only the rooms named after it; the root package (the modes) may
# import them all. Tests included: a room's tests do not reach up either.
rooms='
plan:
transport: plan
cli: plan transport
diagnose: plan cli
rankenv: plan cli
engine: plan cli transport diagnose rankenv
'
testdeps() {
	go list -e -f '{{join .Imports "\n"}}
{{join .TestImports "\n"}}
{{join .XTestImports "\n"}}' "$1" | grep '^gangway/launcher/' | sort -u || true
}
echo "$rooms" | while IFS=: read -r room allowed; do
	[ -n "$room" ] || continue
	for dep in $(testdeps "./launcher/$room"); do
		name=${dep#gangway/launcher/}
		[ "$name" = "$room" ] && continue
		case " $allowed " in *" $name "*) continue ;; esac
		echo "launcher/$room must not import $dep (it may import: $(echo ${allowed:-no other launcher package}))"
		exit 1
	done
	for dep in $(go list -e -f '{{join .Imports "\n"}}' "./launcher/$room" | grep -x 'gangway/launcher' || true); do
		echo "launcher/$room must not import the launcher's root package (the modes)"; exit 1
	done
done || fail=1

for p in $(go list -e ./agent/...); do
	bad=$(deps "$p" | grep -v -e '^gangway/agent$' -e '^gangway/agent/' -e "$internal" || true)
	if [ -n "$bad" ]; then echo "$p must import only agent/... and internal/...; it imports: $bad"; fail=1; fi
done

bad=$(go list -e -f '{{.ImportPath}}: {{join .Imports " "}}' ./... | grep -v '^gangway/cmd/' | grep 'gangway/cmd/' || true)
if [ -n "$bad" ]; then echo "cmd/ is imported by: $bad"; fail=1; fi

# Tests included: -deps -test lists everything a package's tests build.
for p in $(go list -e ./agent/... ./hostfile/... ./nccl/... ./bench/...); do
	bad=$(go list -e -deps -test "$p" | grep -E '^gangway/(launcher(/[^ ]+)?|cmd/[^ ]+)( |$)' | cut -d' ' -f1 | sort -u || true)
	if [ -n "$bad" ]; then
		via=$(go list -e -deps -test -f '{{.ImportPath}}: {{join .Imports " "}}' "$p" |
			grep -E ' gangway/(launcher(/[^ ]+)?|cmd/[^ ]+)( |$)' | cut -d: -f1 | tr '\n' ' ')
		echo "$p (with its tests) must not reach $(echo $bad); imported by: $via"
		fail=1
	fi
done
exit $fail
