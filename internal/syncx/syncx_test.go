package syncx

import (
	"sync"
	"testing"
	"time"
)

func TestDone(t *testing.T) {
	release := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { <-release })
	done := Done(wg.Wait)
	select {
	case <-done:
		t.Fatal("closed while the wait group was still waiting")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("not closed 10s after the wait returned")
	}
}

// TestDoneTimeout is the pattern the package documents: on timeout, make
// the wait return, then wait for the channel.
func TestDoneTimeout(t *testing.T) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { <-stop })
	done := Done(wg.Wait)
	timedOut := false
	select {
	case <-done:
	case <-time.After(20 * time.Millisecond):
		timedOut = true
		close(stop)
		<-done
	}
	if !timedOut {
		t.Fatal("the wait returned before anything released it")
	}
}
