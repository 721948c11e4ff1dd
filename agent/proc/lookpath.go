package proc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// lookPath finds file the way a shell would, but in the rank's PATH rather
// than the agent's, and then, as Open MPI's mpirun does, in the working
// directory dir (a program beside the job runs without "./"). A name with
// a slash is used as is (relative to dir). Errors say what is wrong and
// how to fix it. Callers run it as the rank's user (AsUser): it stats
// and opens paths the user named.
func lookPath(file, path, dir string) (string, error) {
	if strings.Contains(file, "/") {
		p := file
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		if err := executable(p); err != nil {
			return "", notExecutable(file, p, err)
		}
		return file, nil
	}
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	var denied error
	// The working directory ends the list, after PATH (an empty PATH
	// entry is the working directory too).
	for _, d := range append(filepath.SplitList(path), ".") {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, file)
		if !filepath.IsAbs(p) {
			if dir != "" {
				p = filepath.Join(dir, p)
			} else {
				p = "./" + p // exec.Cmd would search PATH again for a bare name
			}
		}
		err := executable(p)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, ErrNotFound) && denied == nil {
			denied = notExecutable(file, p, err)
		}
	}
	if denied != nil {
		return "", denied
	}
	where := dir
	if where == "" {
		where = "."
	}
	return "", fmt.Errorf("%s: %w in PATH or the working directory %s (PATH=%s)", file, ErrNotFound, where, path)
}

// errNoExecBit is executable's error for a regular file without an
// execute bit.
var errNoExecBit = fmt.Errorf("not executable: %w", syscall.EACCES)

func executable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return ErrNotFound
		}
		return err
	}
	if st.IsDir() {
		return fmt.Errorf("is a directory: %w", syscall.EACCES)
	}
	if !st.Mode().IsRegular() {
		// A device, FIFO or socket is no program (exec would refuse it
		// too), and is never opened to look for a #! line.
		return fmt.Errorf("not a regular file: %w", syscall.EACCES)
	}
	if st.Mode()&0o111 == 0 {
		return errNoExecBit
	}
	return nil
}

// notExecutable words executable's error for file (found at p).
func notExecutable(file, p string, err error) error {
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%s: %w (%s)", file, ErrNotFound, p)
	}
	if !errors.Is(err, errNoExecBit) {
		return fmt.Errorf("%s: %w", file, err)
	}
	fix := "chmod +x " + file
	if interp := interpreter(p); interp != "" {
		fix += " (or run " + interp + " " + file + ")"
	}
	return fmt.Errorf("%s: %w; fix: %s", file, err, fix)
}
