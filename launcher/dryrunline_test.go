package launcher

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDryRunLine: a --dry-run environment line stays one line whatever
// the value holds, and bash reads it back as the value.
func TestDryRunLine(t *testing.T) {
	for _, tt := range []struct{ kv, want string }{
		{"A=plain value", "A=plain value"},
		{"A=", "A="},
		{"A=it's", "A=it's"}, // no control character: as is
		{"A=x\ny", `A=$'x\ny'`},
		{"A=x\ty'z\\", `A=$'x\ty\'z\\'`},
		{"A=\r\x1b[0m\x7f", `A=$'\x0d\x1b[0m\x7f'`},
		{"BASH_FUNC_f%%=() {  echo hi\n}", `BASH_FUNC_f%%=$'() {  echo hi\n}'`},
	} {
		got := dryRunLine(tt.kv)
		if got != tt.want {
			t.Errorf("dryRunLine(%q) = %q, want %q", tt.kv, got, tt.want)
		}
		if strings.Contains(got, "\n") {
			t.Errorf("dryRunLine(%q) = %q: more than one line", tt.kv, got)
		}
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	// Values with a control character are written as bash reads them.
	for _, v := range []string{"x\ny", "x\ty'z\\", "\r\x1b[0m\x7f"} {
		line := dryRunLine("V=" + v)
		out, err := exec.Command("bash", "-c", line+`; printf %s "$V"`).Output()
		if err != nil || string(out) != v {
			t.Errorf("bash read %q back as %q (%v)", line, out, err)
		}
	}
}
