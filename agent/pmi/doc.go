// Package pmi is the PMI server a gangway agent runs for its local ranks.
//
// It speaks PMI-1 ("simple PMI") and PMI-2 on the same socket, as MPICH's
// hydra proxy does (docs/pmi.md §1–2): a connection whose first 4 bytes are
// "cmd=" or "mcmd" is PMI-1, and "cmd=init pmi_version=2" switches it to
// PMI-2 framing; anything else is PMI-2 framing from the first byte.
//
// Barriers and the key-value space span the whole job: when every local rank
// has entered barrier number seq (PMI-1 barrier_in, PMI-2 kvs-fence), the
// server calls its Fencer once with the puts its ranks made since the
// previous barrier, merges the job-wide answer into its cache and releases
// its ranks. One Fence per host per barrier, never per rank.
//
// Choices where the protocol leaves room:
//   - Puts become visible to gets when the next barrier completes, on every
//     host at once, never earlier (MPICH orders puts and gets by barriers).
//     Gets never block: a missing key is rc=-1 (PMI-1) or found=FALSE (PMI-2).
//   - PMI_process_mapping is Job.Mapping; PMI_dead_processes is always the
//     empty list (found, value ""), as hydra answers when no rank died: this
//     server does not know about deaths on other hosts.
//   - PMI-1 replies never exceed 1023 bytes with their '\n': a put whose
//     value could not be returned in one get_result line is refused with
//     rc=-1 msg=value_too_long, keys are at most 64 bytes.
//   - PMI-2 replies carry a "%6d" header (right-aligned, exact length), as
//     hydra writes. Requests are read with MPICH 4.0.2's quirk in mind: a
//     left-aligned header counts itself, so its last 6 bytes are garbage
//     (cut at NUL, fragments and tokens without '=' dropped, and a ';' at
//     the garbage boundary always ends the last pair).
//   - PMI-2 abort carries no exit code; Events.Abort then reports 1.
//   - publish_name, unpublish_name and lookup_name (and PMI-2 name-publish,
//     name-unpublish and name-lookup) are job-wide: the server asks
//     Events.Names, which the agent forwards to the launcher, so a name one
//     host's rank publishes is found by a rank on any host. A lookup of a
//     name not published is answered at once (not found), never held, as
//     Hydra answers. Without Names (a job whose ranks are all local) the
//     server keeps the names itself. Spawn (mcmd=spawn, PMI-2 spawn) is
//     refused.
//   - A rank is served one request at a time, as PMI-1 is specified and
//     MPICH's clients speak both protocols: while the reply to a barrier,
//     a waiting getnodeattr or a name-service call is pending, the server
//     reads the rank's next request (so it sees the rank hang up) and no
//     further. A threaded PMI-2 rank's requests are answered in order.
//   - What the server keeps for a job is bounded (Limits): keys and bytes
//     of pending puts, barrier results, node attributes and its own name
//     table together, by default 262,144 keys and 32 MiB (each key costs
//     its bytes plus 64). A put beyond that gets an error reply (PMI-1
//     rc=-1, PMI-2 rc=1, with the limit in the message); a barrier whose
//     job-wide result would not fit fails. PMI-2 node attributes obey
//     PMI-2's key and value lengths, as kvs-put does. Hydra has no such
//     bound; it trusts its ranks.
//   - Every reply has a write deadline (Limits.WriteTimeout, 10 s): a rank
//     that leaves a socket buffer of replies unread that long loses its
//     connection and is reported through Events.Fail, for the agent to
//     end it, as Hydra kills a job whose rank's PMI socket closes early.
//     The time runs only while the socket is full (conn.writeLocked).
//   - A rank's abort is reported once.
//   - Every rank has its own socketpair (PMI_FD); there is no PMI_PORT
//     listener. A rank that names itself anyway (PMI-1 initack pmiid=,
//     PMI-2 fullinit pmirank=) must name its own rank, or the connection
//     is closed (PMI-1) or the request refused (PMI-2).
package pmi
