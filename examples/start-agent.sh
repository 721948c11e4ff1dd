#!/bin/sh
# Container entrypoint for worker nodes: replaces the classic "start-slave"
# script (sshd on port 22122 with keys from mounted secrets) with the
# gangway agent.
#
# Environment (all optional):
#   GANGWAY_SECRETS   directory with mounted secrets (default /etc/gangway/secrets):
#                       authorized_keys       public keys allowed to log in as the
#                                             agent's user
#                       trusted_user_ca_keys  user CAs whose certificates log in
#                                             (one of these two is required)
#                       ssh_host_ed25519_key  host key to keep across restarts (optional)
#                       ssh_host_ed25519_key-cert.pub
#                                             its host certificate (optional): launchers
#                                             that trust the host CA need no known_hosts
#                                             entry for this pod (examples/certs.sh)
#   GANGWAY_PORT      port to listen on (default 22122)
#   GANGWAY_NAME      name reported to the launcher (default: hostname)
#   GANGWAY_AGENT     agent binary (default: agent on PATH)
#   GANGWAY_ARGS      extra agent arguments
set -eu
secrets=${GANGWAY_SECRETS:-/etc/gangway/secrets}
port=${GANGWAY_PORT:-22122}
name=${GANGWAY_NAME:-$(hostname)}
agent=${GANGWAY_AGENT:-agent}
state=${HOME:-/root}/.gangway
mkdir -p "$state"
chmod 700 "$state"

if [ ! -r "$secrets/authorized_keys" ] && [ ! -r "$secrets/trusted_user_ca_keys" ]; then
	echo "start-agent: neither $secrets/authorized_keys nor $secrets/trusted_user_ca_keys: mount the launcher's public key or a user CA there" >&2
	exit 1
fi
# Secrets are often mounted read-only with loose modes; copy them with the
# modes an SSH server expects (the agent refuses a host key others can read,
# and key files others can write).
set --
if [ -r "$secrets/authorized_keys" ]; then
	install -m 0600 "$secrets/authorized_keys" "$state/authorized_keys"
fi
if [ -r "$secrets/trusted_user_ca_keys" ]; then
	install -m 0644 "$secrets/trusted_user_ca_keys" "$state/trusted_user_ca_keys"
	set -- "$@" --trusted-user-ca-keys "$state/trusted_user_ca_keys"
fi
if [ -r "$secrets/ssh_host_ed25519_key" ]; then
	install -m 0600 "$secrets/ssh_host_ed25519_key" "$state/ssh_host_ed25519_key"
	if [ -r "$secrets/ssh_host_ed25519_key-cert.pub" ]; then
		install -m 0644 "$secrets/ssh_host_ed25519_key-cert.pub" "$state/ssh_host_ed25519_key-cert.pub"
		set -- "$@" --host-cert "$state/ssh_host_ed25519_key-cert.pub"
	fi
fi
# With no mounted host key the agent creates one in $state on first start.

# exec: the agent becomes the container's PID 1 and does an init's duties
# itself (it reaps orphans and forwards SIGTERM to the real agent, its
# child), so no tini is needed. Where cgroup2 is mounted read-only, as
# containers often have it, each rank's supervisor contains it alone.

# shellcheck disable=SC2086
exec "$agent" --listen ":$port" --name "$name" \
	--host-key "$state/ssh_host_ed25519_key" \
	--authorized-keys "$state/authorized_keys" \
	"$@" ${GANGWAY_ARGS:-}
