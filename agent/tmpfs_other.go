//go:build !linux

package agent

// onTmpfs is false off Linux: the system's temporary directory is used.
func onTmpfs(dir string) bool { return false }
