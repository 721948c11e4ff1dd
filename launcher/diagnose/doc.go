// Package diagnose says why a launch ended and what went wrong: the causes
// a job ends with (RankError, SignalError, TimeoutError, HangError), the
// one mapping from a cause to the launcher's exit status (ExitCode), the
// failures grouped and written at the end or into --report (Failures), a
// rank's root cause from torch's error file (rootCause), and what the
// stacks of a hung job show (StackFindings).
//
// It is pure: values in, words and numbers out; it starts, dials, logs
// and reads nothing. It imports launcher/plan and launcher/cli (for the
// usage errors' exit status) and no other launcher package; the engine
// and the modes call it.
package diagnose
