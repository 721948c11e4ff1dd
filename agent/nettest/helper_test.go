package nettest

import (
	"fmt"
	"os"
)

// helperMain runs the test binary as a helper instead of the tests.
func helperMain(mode string) int {
	switch mode {
	default:
		fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
		return 2
	}
}
