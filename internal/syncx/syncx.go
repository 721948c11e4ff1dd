// Package syncx holds the synchronisation helper the standard library
// lacks: a wait that can take part in a select. It imports no gangway
// package, so every package may use it.
package syncx

// Done calls wait in a new goroutine and returns a channel that is closed
// when wait returns. It turns a blocking wait (sync.WaitGroup.Wait,
// exec.Cmd.Wait) into something to select on, most often against a
// timeout:
//
//	drained := syncx.Done(pumps.Wait)
//	select {
//	case <-drained:
//	case <-time.After(2 * time.Second):
//		r.Close() // what the pumps block on
//		<-drained
//	}
//
// The goroutine belongs to the caller. A caller that stops waiting on the
// channel (its timeout fired) must make wait return, by closing or
// cancelling what the waited-for work blocks on, and then receive from the
// channel, so that no goroutine outlives its owner. A caller that cannot
// make wait return must say in a comment what ends it.
func Done(wait func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait()
	}()
	return done
}
