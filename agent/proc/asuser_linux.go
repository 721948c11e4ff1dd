//go:build linux

package proc

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// AsUser calls fn with the file-system identity of cred's user: every
// open, stat and readlink fn makes is checked by the kernel as that
// user's would be (uid, gid, supplementary groups, ACLs, and none of
// root's overrides), so nothing the agent looks at for a user tells that
// user more than their own shell could. cred nil calls fn as this
// process.
//
// fn runs on a locked OS thread whose fsuid, fsgid and groups are changed
// for the call only (per thread in Linux: the raw system calls, not the
// ones Go applies to every thread) and restored before the thread is
// unlocked. The thread is given back rather than ended: a child forked
// earlier from it with a parent-death signal (every rank and supervisor)
// would get that signal if it ended. A restore that fails panics: an
// agent thread must never go on with a user's identity. fn must not
// start goroutines that touch files.
func AsUser(cred *syscall.Credential, fn func() error) error {
	if cred == nil {
		return fn()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	saved, err := unix.Getgroups()
	if err != nil {
		return fmt.Errorf("as user %d: getgroups: %w", cred.Uid, err)
	}
	uid, gid := os.Geteuid(), os.Getegid()
	defer restoreIdentity(uid, gid, saved)
	groups := make([]int, len(cred.Groups))
	for i, g := range cred.Groups {
		groups[i] = int(g)
	}
	if err := unix.Setgroups(groups); err != nil {
		return fmt.Errorf("as user %d: setgroups: %w", cred.Uid, err)
	}
	// setfsuid and setfsgid return the previous value and never fail
	// visibly; an invalid id (-1) changes nothing and returns the
	// current one, which must be the one asked for.
	unix.SetfsgidRetGid(int(cred.Gid))
	if g, _ := unix.SetfsgidRetGid(-1); g != int(cred.Gid) {
		return fmt.Errorf("as user %d: fsgid is %d, not %d", cred.Uid, g, cred.Gid)
	}
	unix.SetfsuidRetUid(int(cred.Uid))
	if u, _ := unix.SetfsuidRetUid(-1); u != int(cred.Uid) {
		return fmt.Errorf("as user %d: fsuid is %d", cred.Uid, u)
	}
	return fn()
}

// restoreIdentity gives the locked thread back the agent's own fsuid,
// fsgid and groups, or panics.
func restoreIdentity(uid, gid int, groups []int) {
	unix.SetfsuidRetUid(uid)
	unix.SetfsgidRetGid(gid)
	err := unix.Setgroups(groups)
	u, _ := unix.SetfsuidRetUid(-1)
	g, _ := unix.SetfsgidRetGid(-1)
	now, gerr := unix.Getgroups()
	if err != nil || gerr != nil || u != uid || g != gid || !slices.Equal(now, groups) {
		panic(fmt.Sprintf("proc: cannot restore the agent thread's identity (fsuid %d, fsgid %d, groups %v, want %d, %d, %v): %v %v", u, g, now, uid, gid, groups, err, gerr))
	}
}

// Enterable says why cred's user (this process's, when nil) cannot make
// dir its working directory, or nil: every directory on the way must let
// the user search it and dir must be a directory the user may search,
// with ACLs and groups counted (faccessat2 with AT_EACCESS, as the user;
// on kernels before 5.8, the mode bits of dir itself).
func Enterable(cred *syscall.Credential, dir string) error {
	return AsUser(cred, func() error {
		err := unix.Faccessat2(unix.AT_FDCWD, dir, unix.X_OK, unix.AT_EACCESS)
		if err == nil || !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM) {
			if err == nil {
				return isDir(dir)
			}
			return err
		}
		// No faccessat2: the open checks the way there, the mode bits
		// the last step.
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		if !searchable(&st, cred) {
			return unix.EACCES
		}
		return nil
	})
}

// isDir is nil when dir is a directory, else ENOTDIR.
func isDir(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return unix.ENOTDIR
	}
	return nil
}

// searchable reports whether cred's user (this process's when nil) may
// search a directory by its mode bits.
func searchable(st *unix.Stat_t, cred *syscall.Credential) bool {
	uid, gids := uint32(os.Geteuid()), []uint32{uint32(os.Getegid())}
	if cred != nil {
		uid, gids = cred.Uid, append([]uint32{cred.Gid}, cred.Groups...)
	}
	switch {
	case uid == 0:
		return st.Mode&0o111 != 0
	case st.Uid == uid:
		return st.Mode&0o100 != 0
	case slices.Contains(gids, st.Gid):
		return st.Mode&0o010 != 0
	}
	return st.Mode&0o001 != 0
}
