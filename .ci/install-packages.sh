#!/bin/sh
# Installs the Debian packages given as arguments that are not installed
# yet. Idempotent: prints nothing and touches nothing when all are there.
set -eu
missing=""
for p in "$@"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "missing packages:$missing (run as root, or install them, to run every test)" >&2
	exit 0
fi
echo "installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
