package textx

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// maxLogString is how much of a string a client chose (a user name, a
// command, an env name, a certificate's key ID) goes into a log line.
const maxLogString = 64

// Clip shortens an untrusted string for the log: at most maxLogString
// bytes, cut at a character boundary, with the full length noted.
func Clip(s string) string {
	if len(s) <= maxLogString {
		return s
	}
	cut := maxLogString
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "...(" + strconv.Itoa(len(s)) + " bytes)"
}

// ClipMore is s, at most max bytes of it, with how many more there were:
// "...(N more bytes)" words what an agent or a rank said at length (an
// Error, a stderr line) in the launcher's reports. Only the kept part is
// copied.
func ClipMore[S ~string | ~[]byte](s S, max int) string {
	if len(s) <= max {
		return string(s)
	}
	return fmt.Sprintf("%s... (%d more bytes)", s[:max], len(s)-max)
}
