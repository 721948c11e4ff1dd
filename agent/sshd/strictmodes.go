package sshd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// UnsafeError is a key file, or a directory above it, that others could
// have written: sshd's StrictModes refuses to trust such a file, and so
// does the agent.
type UnsafeError struct {
	Path string // the file or directory at fault
	Why  string
}

func (e *UnsafeError) Error() string { return e.Path + ": " + e.Why }

// maxKeyFile bounds what is read of an authorized_keys or CA keys file.
const maxKeyFile = 4 << 20

// readTrusted reads a file of keys that grants logins to uid, after the
// checks of sshd's StrictModes: the file (symbolic links resolved) must
// be a regular file owned by uid or root and writable by neither group
// nor others, and so must every directory above it, up to and including
// home when the file lies under home, else up to /. One deviation from
// sshd: a root-owned directory with the sticky bit (/tmp) passes, since
// nobody but its owner can rename or remove an entry in it, and the
// entries below it are checked in turn.
func readTrusted(path string, uid uint32, home string) ([]byte, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, err
	}
	// O_NONBLOCK: opening a FIFO planted in place of the file must not
	// block the login.
	f, err := os.OpenFile(real, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, &UnsafeError{real, "not a regular file"}
	}
	if why := unsafeOwnerOrMode(st, uid, false); why != "" {
		return nil, &UnsafeError{real, why}
	}
	stop := ""
	if home != "" {
		if h, err := filepath.EvalSymlinks(home); err == nil && within(real, h) {
			stop = h
		}
	}
	for dir := filepath.Dir(real); ; dir = filepath.Dir(dir) {
		dst, err := os.Stat(dir)
		if err != nil {
			return nil, err
		}
		if why := unsafeOwnerOrMode(dst, uid, true); why != "" {
			return nil, &UnsafeError{dir, why}
		}
		if dir == stop || dir == "/" || dir == "." {
			break
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", real, maxKeyFile)
	}
	return b, nil
}

// unsafeOwnerOrMode says what is wrong with a file's or directory's
// ownership or mode, or "".
func unsafeOwnerOrMode(fi os.FileInfo, uid uint32, dir bool) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "cannot read its owner"
	}
	if st.Uid != uid && st.Uid != 0 {
		return fmt.Sprintf("owned by uid %d, not by the user (uid %d) or root", st.Uid, uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		if dir && st.Uid == 0 && fi.Mode()&os.ModeSticky != 0 {
			return ""
		}
		return fmt.Sprintf("writable by group or others (mode %04o)", fi.Mode().Perm())
	}
	return ""
}

// within reports whether path lies under dir (both clean and absolute).
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !filepath.IsAbs(rel) && (len(rel) < 3 || rel[:3] != "../")
}

// ErrHostKeyModes is returned for a host key others may read.
var ErrHostKeyModes = errors.New("host key is accessible by group or others")

// checkHostKeyFile refuses a private host key that group or others may
// read or write (sshd's "UNPROTECTED PRIVATE KEY FILE").
func checkHostKeyFile(path string, fi os.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("host key %s: not a regular file", path)
	}
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		return fmt.Errorf("%w: %s has mode %04o; make it private with chmod 600 %s", ErrHostKeyModes, path, m, path)
	}
	return nil
}
