package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

// TestProgress: with --progress, a status line appears while 4 synthetic
// ranks report throughput; it names the attempt, the ranks reporting and
// the slowed rank, and it is a line of its own on stderr, never inside a
// rank's line. Without --progress (stderr is not a terminal here) there is
// none.
func TestProgress(t *testing.T) {
	bin := buildSynthetic(t, t.TempDir())
	args := []string{"-l", "-np", "4", "--warmup-steps", "0", bin, "-steps", "300", "-display-every", "5", "-batch-size", "24", "-work", "1200",
		"-slow-ranks", "2", "-slowdown", "0.5"}
	l := startLauncher(t, false, append([]string{"--progress", "--progress-every", "0.3"}, args...)...)
	assertCode(t, l, 0)
	line := regexp.MustCompile(`^launcher: progress: attempt 1, \d+s: [0-9.]+ images/sec( ± [0-9.]+)? \(tf_cnn_images_per_sec\), 4 of 4 ranks reporting, slowest rank 2 on localhost \(-\d+\.\d%\)$`)
	n := 0
	for _, ln := range strings.Split(l.stderr(), "\n") {
		switch {
		case ln == "", strings.HasPrefix(ln, "["):
		case strings.HasPrefix(ln, "launcher: progress: "):
			if line.MatchString(ln) {
				n++
			} else if strings.Contains(ln, "4 of 4") {
				t.Errorf("progress line %q does not match %v", ln, line)
			}
		default:
			t.Errorf("stderr line neither a rank's nor the launcher's: %q", ln)
		}
	}
	if n == 0 {
		t.Errorf("no progress line with every rank reporting and rank 2 slowest:\n%s", e2e.Tail(l.stderr(), 3000))
	}
	quiet := startLauncher(t, false, args...)
	assertCode(t, quiet, 0)
	if strings.Contains(quiet.stderr(), "progress:") {
		t.Errorf("progress lines without --progress on a pipe:\n%s", e2e.Tail(quiet.stderr(), 3000))
	}
}
