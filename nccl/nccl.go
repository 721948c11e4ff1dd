// Package nccl makes the launcher's NCCL decisions as pure functions of
// host facts: which network interface and address each host uses
// (ChooseInterface, from internal/netchoice), which InfiniBand ports, the environment that pins them
// (Env), which GPUs a host's ranks get (ChooseGPUs), and whether the NCCL
// variables a user set make sense on the hosts (Check, which reads the
// list syntax NCCL_SOCKET_IFNAME and NCCL_IB_HCA share as NCCL does).
//
// The package has its own small input types; the launcher converts the
// agent's wire.Facts into them. Nothing here logs, touches the network or
// reads files.
package nccl
