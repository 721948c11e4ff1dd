package main

import (
	"os"
	"syscall"
	"testing"
)

// TestBrokenOutput: a pipe whose reader closed, and a socket whose peer
// closed, are broken; open ones, and a regular file, are not.
func TestBrokenOutput(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if brokenOutput(int(w.Fd())) {
		t.Error("an open pipe reads as broken")
	}
	r.Close()
	if !brokenOutput(int(w.Fd())) {
		t.Error("a pipe without a reader reads as fine")
	}

	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fds[0])
	if brokenOutput(fds[0]) {
		t.Error("an open socket reads as broken")
	}
	syscall.Close(fds[1])
	if !brokenOutput(fds[0]) {
		t.Error("a socket whose peer closed reads as fine")
	}

	f, err := os.Create(t.TempDir() + "/out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if brokenOutput(int(f.Fd())) {
		t.Error("a regular file reads as broken")
	}
}

// TestRelayDropsStraySIGPIPE: SIGPIPE is passed on only when the output
// is broken; other signals always are.
func TestRelayDropsStraySIGPIPE(t *testing.T) {
	for _, broken := range []bool{false, true} {
		raw, sig := make(chan os.Signal, 3), make(chan os.Signal, 3)
		raw <- syscall.SIGPIPE
		raw <- syscall.SIGTERM
		close(raw)
		relay(raw, sig, func() bool { return broken })
		close(sig)
		var got []os.Signal
		for s := range sig {
			got = append(got, s)
		}
		want := []os.Signal{syscall.SIGTERM}
		if broken {
			want = []os.Signal{syscall.SIGPIPE, syscall.SIGTERM}
		}
		if len(got) != len(want) || got[0] != want[0] || got[len(got)-1] != want[len(want)-1] {
			t.Errorf("broken=%v: relayed %v, want %v", broken, got, want)
		}
	}
}
