// Package rankenv is the rank-environment pipeline, one pass per attempt:
// the layout (Plan: the hosts to reach and the ranks on them, placed once
// by one function, before any transport is built, or as soon as the
// hosts' facts give the slots: Complete), then, once the hosts are
// reached (Host), each host's data network (ChooseNetworks), each rank's
// GPUs (assignGPUs), what every rank shares (newJobEnv, the same for a
// run and a dry run: -x, -genv, --env-file, and what the ranks get of the
// launcher's own environment, Forwarded, less the host-specific names of
// HostSpecific) and every rank's environment with each variable's source
// (Builder.Vars; each host's part of its start message, whole or
// compact: Attempt.Starts), where forwarded values lose to the launcher's
// choices and the user's -x wins over those but never over a rank's
// identity (userWins, the one owner of that rule). CheckSizes and
// checkStart refuse what execve or the protocol could not carry. Prepare runs it
// for a run, DryRun for --dry-run; the placement table of --dry-run and
// --display-map is here too (WritePlacement).
//
// It imports launcher/plan and launcher/cli, nccl for the network and GPU
// decisions and agent/wire for the facts; no transport, engine or mode.
// It reaches no host itself: the engine hands it what the hosts said.
package rankenv
