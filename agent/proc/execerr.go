package proc

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// execError says why the program at path (named name on the command line)
// could not be executed, in the words a user needs: what is wrong and how
// to fix it, without Go's "fork/exec PATH:" prefix. ENOENT on a file that
// exists means its #! interpreter is missing, which names the interpreter
// (and wraps ErrNotFound, exit code 127). Callers run it as the rank's
// user (AsUser): it stats and reads the program's file.
func execError(name, path string, err error) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("%s: cannot start: %v", name, pe.Err)
		}
		return fmt.Errorf("%s: cannot start: %v", name, err)
	}
	switch errno {
	case syscall.ENOENT:
		if _, serr := os.Stat(path); serr != nil {
			return fmt.Errorf("%s: %w (%s)", name, ErrNotFound, path)
		}
		if interp := interpreter(path); interp != "" {
			return notFound{fmt.Errorf("%s: its interpreter %s (the script's #! line) does not exist: install it or fix the #! line", name, interp)}
		}
		return fmt.Errorf("%s: cannot start: a library or loader it needs is missing (%v)", name, errno)
	case syscall.ENOEXEC:
		return fmt.Errorf("%s: cannot start: not a program for this machine and no #! line (%v)", name, errno)
	case syscall.EACCES:
		if interp := interpreter(path); interp != "" {
			return fmt.Errorf("%s: cannot start: its interpreter %s (the script's #! line) is not executable (%v)", name, interp, errno)
		}
		return fmt.Errorf("%s: cannot start: permission denied (is its file system mounted noexec?)", name)
	}
	return fmt.Errorf("%s: cannot start: %v", name, errno)
}

// notFound is an error that counts as ErrNotFound (exit code 127) without
// saying "program not found".
type notFound struct{ error }

func (e notFound) Is(target error) bool { return target == ErrNotFound }

// shebangMax is the most of a file interpreter reads: the kernel reads
// no more of a #! line either (BINPRM_BUF_SIZE).
const shebangMax = 256

// interpreter is the program named by path's #! line, "" when it has none
// or path is not a regular file. It opens path without blocking (a FIFO)
// and reads at most shebangMax bytes, as the rank's user (callers run it
// under AsUser), so it tells nobody more than their own shell could.
func interpreter(path string) string {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	buf := make([]byte, shebangMax)
	n, _ := io.ReadFull(f, buf)
	line, _, _ := strings.Cut(string(buf[:n]), "\n")
	rest, ok := strings.CutPrefix(line, "#!")
	if !ok {
		return ""
	}
	if fields := strings.Fields(rest); len(fields) > 0 {
		return fields[0]
	}
	return ""
}
