package cli

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEFlagReference keeps the README's flag reference true: it must
// contain the --help text verbatim, and every flag must be in --help.
func TestREADMEFlagReference(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), Usage) {
		t.Error("README.md's launcher flag reference differs from launcher.Usage; paste `bin/launcher -h` into it")
	}
	var c Config
	fs := c.flagSet()
	for _, name := range flagNames(fs) {
		if !regexp.MustCompile(`(^|[\s,\[])-` + regexp.QuoteMeta(name) + `([^a-z0-9-]|$)`).MatchString(Usage) {
			t.Errorf("flag -%s is not documented in Usage", name)
		}
	}
}
