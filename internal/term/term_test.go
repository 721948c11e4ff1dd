package term

import (
	"os"
	"syscall"
	"testing"
)

// TestIsTerminal: a pipe, a regular file and /dev/null (a character
// device) are not terminals; a pseudo-terminal is.
func TestIsTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	for _, nf := range []*os.File{r, w, f, null} {
		if IsTerminal(nf) {
			t.Errorf("%s is a terminal", nf.Name())
		}
	}
	tty, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal to test with: %v", err)
	}
	defer tty.Close()
	if !IsTerminal(tty) {
		t.Error("a pseudo-terminal is not a terminal")
	}
}

// TestBackground: a pipe, and a pseudo-terminal that is not this
// process's controlling terminal, are never a background terminal (the
// launcher then reads them as usual); a shell job's case is
// TestLauncherInBackground's, with a real shell.
func TestBackground(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	tty, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal to test with: %v", err)
	}
	defer tty.Close()
	for _, f := range []*os.File{r, tty} {
		if Background(f) {
			t.Errorf("%s is taken for a background terminal", f.Name())
		}
	}
}
