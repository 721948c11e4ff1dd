// Package engine runs a job: the attempts of a launch (Run: dial,
// prepare, run and close under one cancellation cause, then restarts),
// the dial phase (Dial: every host reached in parallel, its session and
// heartbeat), the prepare phase (the rank-environment pipeline's results
// sent as StartJob, the cache drop, the preflight, every host's Ready),
// the job loop (job.go performs what state.apply, pure and table-tested,
// decides: state.go, state_pmi.go, state_dump.go), rank output (the
// console, per-rank files, progress) and the launch's ending, worded by
// launcher/diagnose. Scope is the prologue every mode shares: the
// launcher's signals and --timeout as the context's cause.
//
// It imports launcher/plan, cli, transport, rankenv and diagnose, and of
// the agent's packages agent/wire only; never the launcher's root package
// (the modes), which is the only one that imports it.
package engine
