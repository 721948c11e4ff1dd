package health

import "syscall"

// Statfs reads the space of the file system holding dir: Free is what an
// unprivileged user may still write (f_bavail), as the ranks see it.
func Statfs(dir string) (TmpStat, error) {
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		return TmpStat{}, err
	}
	bs := uint64(s.Bsize)
	return TmpStat{Free: s.Bavail * bs, Total: s.Blocks * bs}, nil
}
