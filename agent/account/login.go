package account

// Login is who a launcher session serves, as its SSH login established.
// The zero Login is the agent's own user (the in-process local agent,
// --stdio), with nothing changed.
type Login struct {
	// Account runs the session's ranks (ids, groups, HOME, USER, LOGNAME,
	// SHELL); nil: the agent's own user and environment.
	Account *Account
	// NoDropCaches, when not empty, is why this login may not drop page
	// caches.
	NoDropCaches string
	// TakeJob, when set, takes a place for the session's job under its
	// user's limit on jobs, or says why not (an error naming the limit);
	// release gives the place back. nil: no limit.
	TakeJob func() (release func(), err error)
	// JobID, when not empty, is the one job this login may serve: it came
	// with a job certificate (a relay logging in for the launcher), and a
	// Hello of another job is refused.
	JobID string
}
