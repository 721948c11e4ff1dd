//go:build !linux

package health

import "errors"

// Statfs is Linux's only; elsewhere the TMPDIR check fails with this.
func Statfs(dir string) (TmpStat, error) {
	return TmpStat{}, errors.New("statfs: not supported on this system")
}
