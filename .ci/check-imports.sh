#!/bin/sh
# Imports point one way (see README "How it works"): the packages under
# internal/ import no gangway package; the other leaf packages import none
# but those; launcher imports only agent/wire of the agent's packages (and
# the leaves and internal/); nothing imports cmd/.
set -eu
fail=0
deps() { go list -f '{{join .Imports "\n"}}' "$1" | grep '^gangway' || true; }
for pkg in $(go list ./internal/...); do
	bad=$(deps "$pkg")
	if [ -n "$bad" ]; then echo "$pkg must not import: $bad"; fail=1; fi
done
for leaf in ./hostfile ./nccl ./bench ./agent/wire ./agent/proc ./agent/pmi; do
	bad=$(deps "$leaf" | grep -v '^gangway/internal/' || true)
	if [ -n "$bad" ]; then echo "$leaf must not import: $bad"; fail=1; fi
done
bad=$(deps ./launcher | grep -v -e '^gangway/agent/wire$' -e '^gangway/hostfile$' -e '^gangway/nccl$' -e '^gangway/bench$' -e '^gangway/internal/' || true)
if [ -n "$bad" ]; then echo "./launcher must import only agent/wire, hostfile, nccl, bench and internal/...; it imports: $bad"; fail=1; fi
bad=$(go list -f '{{.ImportPath}}: {{join .Imports " "}}' ./... | grep -v '^gangway/cmd/' | grep 'gangway/cmd/' || true)
if [ -n "$bad" ]; then echo "cmd/ is imported by: $bad"; fail=1; fi
exit $fail
