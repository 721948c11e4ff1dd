package main

import (
	"bytes"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/cmd/internal/manpage"
)

// TestManPage: the agent's man page, written from its -h, renders with
// groff without warnings and names every flag -h lists.
func TestManPage(t *testing.T) {
	help := agentHelp(t)
	var page bytes.Buffer
	if err := manpage.Write(&page, manpage.Page{Name: "agent", Summary: "gangway's per-node agent", Version: "test"}, help); err != nil {
		t.Fatal(err)
	}
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Skipf("groff is not installed (apt-get install groff-base): %v", err)
	}
	cmd := exec.Command(groff, "-man", "-Tutf8", "-ww", "-rLL=200n")
	cmd.Stdin = &page
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || errb.Len() > 0 {
		t.Fatalf("groff: %v\n%s", err, errb.String())
	}
	text := regexp.MustCompile(".\b").ReplaceAllString(out.String(), "")
	flags := regexp.MustCompile(`(?m)^  (-[a-z][a-z0-9-]*)`).FindAllStringSubmatch(help, -1)
	if len(flags) < 10 {
		t.Fatalf("agent -h lists %d flags:\n%s", len(flags), help)
	}
	for _, f := range flags {
		if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(f[1]) + `(\s|$)`).MatchString(text) {
			t.Errorf("man page has no entry for %s", f[1])
		}
	}
	for _, s := range []string{"NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "agent [options]"} {
		if !strings.Contains(text, s) {
			t.Errorf("man page lacks %q:\n%s", s, text)
		}
	}
}
