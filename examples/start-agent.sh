#!/bin/sh
# Container entrypoint for worker nodes: replaces the classic "start-slave"
# script (sshd on port 22122 with keys from mounted secrets) with the
# gangway agent. examples/kubernetes shows it in a StatefulSet; the image
# (Dockerfile) installs it as /usr/local/bin/start-agent.sh.
#
# Environment (all optional):
#   GANGWAY_SECRETS   directory of the mounted Secret (default /etc/gangway/secrets):
#                       authorized_keys       public keys allowed to log in as the
#                                             agent's user
#                       trusted_user_ca_keys  user CAs whose certificates log in
#                                             (one of these two is required)
#                       ssh_host_ed25519_key  host key, the pod's identity across
#                                             restarts (without it the identity
#                                             changes whenever the pod is recreated)
#                       ssh_host_ed25519_key-cert.pub
#                                             its host certificate (optional): launchers
#                                             that trust the host CA need no known_hosts
#                                             entry for this pod (examples/certs.sh)
#   GANGWAY_STATE     writable directory for the agent's private copy of the host
#                     key (default $HOME/.gangway; an emptyDir where the root file
#                     system is read-only)
#   GANGWAY_PORT      port to listen on (default 22122)
#   GANGWAY_NAME      name reported to the launcher (default: hostname)
#   GANGWAY_AGENT     agent binary (default: agent on PATH)
#   GANGWAY_ARGS      extra agent arguments
#
# Key files are read where they are mounted, by the agent, at every login:
# when the Secret changes, the kubelet swaps the volume's ..data symbolic
# link and the next login sees the new keys, without a restart (do not
# mount them with subPath: such mounts never change). The agent resolves
# the links and holds the real file to sshd's StrictModes: owned by root or
# the agent's user and writable by neither group nor others, as a Secret
# volume's files are (mode 0644, or the volume's defaultMode).
set -eu
secrets=${GANGWAY_SECRETS:-/etc/gangway/secrets}
port=${GANGWAY_PORT:-22122}
name=${GANGWAY_NAME:-$(cat /proc/sys/kernel/hostname)}
agent=${GANGWAY_AGENT:-agent}
state=${GANGWAY_STATE:-${HOME:-/root}/.gangway}

say() { echo "start-agent: $*" >&2; }

if [ ! -e "$secrets/authorized_keys" ] && [ ! -e "$secrets/trusted_user_ca_keys" ]; then
	say "neither $secrets/authorized_keys nor $secrets/trusted_user_ca_keys: mount the launcher's public key or a user CA there"
	exit 1
fi
mkdir -p "$state"
chmod 700 "$state"

set -- --authorized-keys "$secrets/authorized_keys"
if [ -e "$secrets/trusted_user_ca_keys" ]; then
	set -- "$@" --trusted-user-ca-keys "$secrets/trusted_user_ca_keys"
fi

# The host key: the agent refuses one that group or others may read, and
# Secret volumes make files 0644 unless told otherwise, so the agent gets a
# private copy, made afresh from the mount at every start: the identity is
# the mounted key's, whatever the copy held before.
hostkey=$state/ssh_host_ed25519_key
if [ -e "$secrets/ssh_host_ed25519_key" ]; then
	rm -f "$hostkey.new"
	(umask 077 && cat "$secrets/ssh_host_ed25519_key" >"$hostkey.new")
	mv -f "$hostkey.new" "$hostkey"
	if [ -e "$secrets/ssh_host_ed25519_key-cert.pub" ]; then
		set -- "$@" --host-cert "$secrets/ssh_host_ed25519_key-cert.pub"
	fi
else
	say "WARNING: no host key mounted ($secrets/ssh_host_ed25519_key): the agent uses $hostkey, made on first start, and this host's identity CHANGES whenever that directory is lost (a recreated pod): launchers then refuse it until known_hosts is updated. Mount a host key (and, better, its host certificate) from a Secret: see examples/kubernetes/README.md."
fi

# exec: the agent becomes the container's PID 1 and does an init's duties
# itself (it reaps orphans and forwards SIGTERM to the real agent, its
# child), so no tini is needed. Where cgroup2 is mounted read-only, as
# containers often have it, the job's supervisor contains it alone.

# shellcheck disable=SC2086
exec "$agent" --listen ":$port" --name "$name" --host-key "$hostkey" \
	"$@" ${GANGWAY_ARGS:-}
