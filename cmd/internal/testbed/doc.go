// Package testbed builds multi-host test beds out of Linux network
// namespaces, for gangway's tests and for `make bench`.
//
// A bed with prefix P and subnet S is, in the root namespace, one bridge
// "Pbr" holding 198.18.S.254/24 and, per host i, a namespace "Phi" joined to
// the bridge by a veth pair: "Pvi" in the root namespace (a bridge port) and
// DataNIC(i) inside the namespace with 198.18.S.(i+1)/24. With DeadEnd each
// host also gets DeadEndNIC(i), created before the data NIC so its
// interface index is lower, holding 198.19.S.(i+1)/24. It is a veth whose
// root end "Pdi" is up (the host sees carrier) but in no bridge and without
// an address: ARP on that subnet is never answered and connections to it
// hang, which reproduces the wrong-NIC hang of NCCL and Gloo defaults.
// (A dummy link would do, but this machine's kernel has no dummy driver.)
//
// Typical use in a test:
//
//	roottest.RequireRoot(t)
//	bed, err := testbed.New(t.Context(), testbed.Options{Prefix: "gwl0", Hosts: 4, Subnet: 10, DeadEnd: true, Logf: t.Logf})
//	if err != nil { t.Fatal(err) }
//	t.Cleanup(func() { if err := bed.Close(); err != nil { t.Error(err) } })
//	keys, _ := sshtest.GenKeys(t.TempDir())
//	bed.StartSSHD(t.Context(), 0, 2222, keys)
//	ssh := exec.Command("ssh", append(sshtest.SSHArgs(keys, 2222), "root@"+bed.Hosts()[0].Addr, "true")...)
//	agent, _ := bed.Start(t.Context(), 1, "/path/to/agent", "--name", "h1")
//
// The package only shells out to iproute2's `ip` (batched with `ip -batch -`).
// Of gangway's packages it imports only agent/agenttest/sshtest, whose keys
// StartSSHD authorises (the agent's own tests use the same keys).
//
// Decisions worth knowing:
//
//   - Ownership is by prefix. New first removes leftovers of an earlier
//     crashed run with the same prefix, and Close removes everything the bed
//     made; both match names exactly (namespaces `^Ph[0-9]+$`, links
//     `^P(br|[vd][0-9]+)$`), so prefixes "gwt1" and "gwt10" never touch each
//     other's objects.
//   - SetLinkDown downs the root-side veth: the host keeps its address and
//     sees NO-CARRIER, like a pulled cable or a dead switch port. Downing the
//     NIC inside the namespace would also delete the host's local route, so
//     an agent bound to its data address would break for the wrong reason.
//   - Processes run through `ip netns exec` in their own process group. A
//     tracked process (Start) is stopped with SIGTERM to its group, SIGKILL
//     after a grace period, and then checked in /proc until no member of
//     its group is left, zombies included.
//   - RequireRoot lives in the small package testbed/roottest, so the bench
//     binary, which imports testbed, does not link package testing. Usable
//     is the non-test check it is built on.
//   - StartSSHD gives OpenSSH sessions a clean shell startup by bind-mounting
//     an empty file over ~/.bashrc in sshd's private mount namespace; see
//     StartSSHD for why and what it saves.
package testbed
