#!/bin/sh
# Installs the Debian packages given as arguments that are not installed
# yet. Idempotent: prints nothing and touches nothing when all are there.
# It never starts the distribution's services (slurmctld, slurmd, munge,
# sshd...): the tests run their own daemons under temporary directories.
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
# Without systemd as PID 1, postinst scripts start services through
# invoke-rc.d; a policy-rc.d that exits 101 forbids that. One already in
# place (Docker images ship one) is left alone; ours is removed after.
pol=/usr/sbin/policy-rc.d
if [ ! -e "$pol" ]; then
	printf '#!/bin/sh\n# temporary: gangway .ci/install-packages.sh\nexit 101\n' >"$pol"
	chmod 0755 "$pol"
	trap 'rm -f "$pol"' EXIT
	trap 'exit 130' INT TERM
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
