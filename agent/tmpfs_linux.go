//go:build linux

package agent

import (
	"os"
	"syscall"
)

// onTmpfs reports whether dir is a directory on a tmpfs that this
// process may make directories in safely: world-writable with the sticky
// bit (as /tmp and /dev/shm are), or its own.
func onTmpfs(dir string) bool {
	var fs syscall.Statfs_t
	if syscall.Statfs(dir, &fs) != nil || fs.Type != 0x01021994 { // TMPFS_MAGIC
		return false
	}
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	shared := fi.Mode()&os.ModeSticky != 0 && fi.Mode().Perm()&0o002 != 0
	return (shared || int(st.Uid) == os.Geteuid()) && syscall.Access(dir, 0o3) == nil // W_OK|X_OK
}
