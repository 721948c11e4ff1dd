package transport

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestEvery: ticks repeat until one returns false; stop ends them, waits
// for a tick under way (which sees quit close), and may be called twice.
func TestEvery(t *testing.T) {
	var n atomic.Int32
	done := make(chan struct{})
	stop := every(time.Millisecond, func(<-chan struct{}) bool {
		if n.Add(1) == 3 {
			close(done)
			return false
		}
		return true
	})
	<-done
	stop()
	stop()
	if got := n.Load(); got != 3 {
		t.Errorf("%d ticks after one returned false at the third", got)
	}

	started := make(chan struct{})
	var sawQuit atomic.Bool
	stop = every(time.Millisecond, func(quit <-chan struct{}) bool {
		close(started)
		<-quit
		sawQuit.Store(true)
		return true
	})
	<-started
	stop()
	if !sawQuit.Load() {
		t.Error("stop returned before the tick under way ended")
	}

	stop = every(time.Hour, func(<-chan struct{}) bool { t.Error("ticked"); return true })
	stop()
	stop()
}

// TestKeepaliveFor: ssh's ServerAliveInterval and ServerAliveCountMax
// set a host's keepalive timing, with ssh's count of 3 when only the
// interval is given; unset or 0, the launcher's own timing.
func TestKeepaliveFor(t *testing.T) {
	def := keepalive{KeepaliveInterval, KeepaliveTimeout}
	for _, tc := range []struct {
		interval time.Duration
		count    int
		want     keepalive
	}{
		{0, 0, def},
		{0, 9, def},
		{10 * time.Second, 0, keepalive{10 * time.Second, 30 * time.Second}},
		{10 * time.Second, 9, keepalive{10 * time.Second, 90 * time.Second}},
		{time.Second, 1, keepalive{time.Second, time.Second}},
		{time.Minute, 3, keepalive{time.Minute, 3 * time.Minute}},
		{time.Hour, 1000, keepalive{time.Hour, time.Hour}}, // at most an hour of silence
	} {
		if got := keepaliveFor(hostConfig{ServerAliveInterval: tc.interval, ServerAliveCountMax: tc.count}); got != tc.want {
			t.Errorf("ServerAliveInterval %v, ServerAliveCountMax %d: %+v, want %+v", tc.interval, tc.count, got, tc.want)
		}
	}
}
