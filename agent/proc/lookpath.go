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
// than the agent's. A name with a slash is used as is (relative to dir).
func lookPath(file, path, dir string) (string, error) {
	if strings.Contains(file, "/") {
		p := file
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		if err := executable(p); err != nil {
			return "", fmt.Errorf("%s: %w", file, err)
		}
		return file, nil
	}
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	var denied error
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, file)
		err := executable(p)
		if err == nil {
			if !filepath.IsAbs(p) && dir != "" {
				return filepath.Join(dir, p), nil
			}
			return p, nil
		}
		if !errors.Is(err, ErrNotFound) && denied == nil {
			denied = err
		}
	}
	if denied != nil {
		return "", fmt.Errorf("%s: %w", file, denied)
	}
	return "", fmt.Errorf("%s: %w in PATH %q", file, ErrNotFound, path)
}

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
	if st.Mode()&0o111 == 0 {
		return fmt.Errorf("permission denied: %w", syscall.EACCES)
	}
	return nil
}
