package plan

import (
	"bytes"
	"io"
	"os"
	"syscall"
	"testing"
)

func TestTagStyleResolve(t *testing.T) {
	// A pseudo-terminal's master side is a terminal to Resolve.
	tty, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal to test with: %v", err)
	}
	defer tty.Close()
	var buf bytes.Buffer
	for _, tc := range []struct {
		in   TagStyle
		w    io.Writer
		want TagStyle
	}{
		{TagAuto, &buf, TagNone},
		{TagAuto, io.Discard, TagNone},
		{TagNone, &buf, TagNone},
		{TagRank, &buf, TagRank},
		{TagMpirun, &buf, TagMpirun},
	} {
		if got := tc.in.Resolve(tc.w); got != tc.want {
			t.Errorf("%v.Resolve(%T) = %v, want %v", tc.in, tc.w, got, tc.want)
		}
	}
	for in, want := range map[TagStyle]TagStyle{TagAuto: TagRank, TagNone: TagNone, TagMpirun: TagMpirun} {
		if got := in.Resolve(tty); got != want {
			t.Errorf("%v.Resolve(terminal) = %v, want %v", in, got, want)
		}
	}
	// /dev/null is a character device, not a terminal.
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if got := TagAuto.Resolve(null); got != TagNone {
		t.Errorf("auto.Resolve(/dev/null) = %v, want %v", got, TagNone)
	}
}
