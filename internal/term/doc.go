// Package term tells a terminal from other files, as isatty(3) does: the
// launcher tags rank lines and shows progress only on one, and the agent
// logs for people there.
package term
