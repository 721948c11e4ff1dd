//go:build !linux

package proc

// testHelperMain: the helper parts are Linux tests' (helper_linux_test.go).
func testHelperMain() (int, bool) { return 0, false }
