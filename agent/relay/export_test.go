package relay

import "time"

// SetGatherWait sets how long a round waits for the rest (gatherWait) and
// returns what restores it: a test whose children must all answer gives
// them longer than a loaded machine may take to start their ranks.
func SetGatherWait(d time.Duration) (restore func()) {
	old := gatherWait
	gatherWait = d
	return func() { gatherWait = old }
}
