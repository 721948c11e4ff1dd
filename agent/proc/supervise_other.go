//go:build !linux

package proc

import (
	"fmt"
	"os"
	"runtime"
)

// Supervisors need Linux (child subreapers, parent-death signals).
const supervisorSupported = false

const selfExe = ""

// SupervisorMain fails off Linux.
func SupervisorMain(args []string) int {
	fmt.Fprintf(os.Stderr, "%s: not supported on %s\n", supervisorArgv0, runtime.GOOS)
	return 2
}

func supervisorPath(p string) string { return p }
