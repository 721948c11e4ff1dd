package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEFlagReference keeps the README's agent flag reference true
// (.ci/sync-readme.sh writes it from `bin/agent -h`): every flag of -h,
// with its description, is in it. Defaults that depend on the user
// running the test (paths under $HOME, root) are not compared.
func TestREADMEFlagReference(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)### agent\n\n```\n(.*?)```\n").FindSubmatch(b)
	if m == nil {
		t.Fatal("README.md has no agent flag reference")
	}
	ref := string(m[1])

	help := agentHelp(t)
	flags := 0
	for _, line := range strings.Split(help, "\n") {
		text, _, _ := strings.Cut(line, " (default ")
		if strings.HasPrefix(strings.TrimSpace(line), "-") {
			flags++
		}
		if !strings.Contains(ref, text) {
			t.Errorf("README.md's agent flag reference lacks %q (run .ci/sync-readme.sh)", text)
		}
	}
	if flags < 10 {
		t.Errorf("agent -h lists %d flags:\n%s", flags, help)
	}
}

// agentHelp is what `agent -h` writes (to stderr, as flag does).
func agentHelp(t *testing.T) string {
	t.Helper()
	code, help := runCapturing(t, "-h")
	if code != 0 {
		t.Fatalf("agent -h: exit %d", code)
	}
	return help
}
