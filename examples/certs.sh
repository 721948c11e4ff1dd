#!/bin/sh
# OpenSSH certificates for gangway agents and launchers, with ssh-keygen.
#
#   certs.sh ca DIR                        make DIR/host_ca and DIR/user_ca (keep them offline)
#   certs.sh host DIR HOST_KEY.pub NAMES   sign an agent's host key; NAMES: the names and
#                                          addresses launchers dial, comma-separated
#   certs.sh user DIR KEY.pub USERS [VALIDITY]
#                                          sign a user's key for the accounts USERS
#                                          (comma-separated), valid VALIDITY (default +1d)
#   certs.sh known-hosts DIR PATTERNS      the known_hosts line that trusts every agent
#                                          matching PATTERNS ([*.example.com]:22122,...)
#
# Agents: agent --host-key KEY --host-cert KEY-cert.pub --trusted-user-ca-keys user_ca.pub
# Launchers: the known-hosts line in ~/.ssh/known_hosts, and -i KEY with KEY-cert.pub
# beside it (ssh picks the certificate up the same way).
set -eu
usage() { sed -n '4,11s/^# //p' "$0" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1 dir=$2
shift 2
case $cmd in
ca)
	mkdir -p "$dir"
	chmod 700 "$dir"
	for ca in host_ca user_ca; do
		[ -e "$dir/$ca" ] || ssh-keygen -q -t ed25519 -N '' -C "gangway $ca" -f "$dir/$ca"
	done
	echo "$dir/host_ca signs agents' host keys; $dir/user_ca.pub goes to agents' --trusted-user-ca-keys"
	;;
host)
	[ $# -eq 2 ] || usage
	# -h: a host certificate; its principals are the names launchers dial.
	ssh-keygen -q -s "$dir/host_ca" -h -I "host:${2%%,*}" -n "$2" -V -5m:+52w "$1"
	echo "${1%.pub}-cert.pub: give it to the agent with --host-cert"
	;;
user)
	[ $# -ge 2 ] && [ $# -le 3 ] || usage
	# The principals are the local accounts the key may log in as. Add
	# -O source-address=10.0.0.0/8 or -O force-command=... to restrict it.
	ssh-keygen -q -s "$dir/user_ca" -I "user:${2%%,*}@$(hostname)" -n "$2" -V "${3:-+1d}" "$1"
	echo "${1%.pub}-cert.pub: keep it beside the private key"
	;;
known-hosts)
	[ $# -eq 1 ] || usage
	echo "@cert-authority $1 $(cat "$dir/host_ca.pub")"
	;;
*)
	usage
	;;
esac
