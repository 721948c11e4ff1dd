package manpage

import (
	"bytes"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/launcher/cli"
)

func TestParse(t *testing.T) {
	help := `usage: tool [options] FILE

Does things to FILE.
Second line of the paragraph.

Examples:
  tool -n 2 x      # two

Group one (the default: 3):
  -n, -num N               how many
                           (default 1)
  -long-flag-name-here X   long one
  -exactly-filling-col YYY on column 27

Options:
  -flag string
    	a PrintDefaults entry
    	on two lines
  -v	one-letter switch

Exit status: 0 on success,
2 for usage errors.
`
	d := Parse(help)
	if d.Synopsis != "tool [options] FILE" {
		t.Errorf("synopsis %q", d.Synopsis)
	}
	if len(d.Description) != 1 || d.Description[0] != "Does things to FILE. Second line of the paragraph." {
		t.Errorf("description %q", d.Description)
	}
	if d.ExitStatus != "0 on success, 2 for usage errors." {
		t.Errorf("exit status %q", d.ExitStatus)
	}
	want := []Section{
		{Heading: "Examples", Text: []string{"  tool -n 2 x      # two"}},
		{Heading: "Group one (the default: 3)", Options: []Option{{"-n, -num N", "how many (default 1)"},
			{"-long-flag-name-here X", "long one"}, {"-exactly-filling-col YYY", "on column 27"}}},
		{Heading: "Options", Options: []Option{{"-flag string", "a PrintDefaults entry on two lines"}, {"-v", "one-letter switch"}}},
	}
	if len(d.Sections) != len(want) {
		t.Fatalf("sections %+v", d.Sections)
	}
	for i, w := range want {
		g := d.Sections[i]
		if g.Heading != w.Heading || strings.Join(g.Text, "|") != strings.Join(w.Text, "|") || len(g.Options) != len(w.Options) {
			t.Errorf("section %d = %+v, want %+v", i, g, w)
			continue
		}
		for j := range w.Options {
			if g.Options[j] != w.Options[j] {
				t.Errorf("section %d option %d = %+v, want %+v", i, j, g.Options[j], w.Options[j])
			}
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(cli.Usage)
	f.Add("usage: x\n\nOptions:\n  -v\tverbose\n")
	f.Fuzz(func(t *testing.T, help string) {
		var b bytes.Buffer
		if err := Write(&b, Page{Name: "x", Summary: "y"}, help); err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(l, "'") {
				t.Fatalf("line starts with a control character: %q", l)
			}
		}
	})
}

// Render writes the page and renders it with groff, failing on warnings;
// it skips when groff is not installed.
func Render(t *testing.T, p Page, help string) (roff, text string) {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, p, help); err != nil {
		t.Fatal(err)
	}
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Skipf("groff is not installed (apt-get install groff-base): %v", err)
	}
	cmd := exec.Command(groff, "-man", "-Tutf8", "-ww", "-rLL=200n")
	cmd.Stdin = bytes.NewReader(b.Bytes())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || errb.Len() > 0 {
		t.Fatalf("groff: %v\n%s", err, errb.String())
	}
	// Drop overstrike bold and underline, which -Tutf8 may use.
	return b.String(), regexp.MustCompile(".\b").ReplaceAllString(out.String(), "")
}

// TestLauncherPage: the launcher's page renders, has the sections a man
// page has, and names every flag of the flag set.
func TestLauncherPage(t *testing.T) {
	roff, text := Render(t, Page{Name: "launcher", Summary: "run a gang of ranks", Version: "test", SeeAlso: []string{"agent"}}, cli.Usage)
	for _, s := range []string{"NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS", "SEE ALSO", "launcher - run a gang of ranks"} {
		if !strings.Contains(text, s) {
			t.Errorf("rendered page lacks %q:\n%s", s, text)
		}
	}
	if !strings.Contains(text, "124 on -timeout") {
		t.Errorf("EXIT STATUS lacks the timeout code")
	}
	for _, name := range cli.FlagNames() {
		re := regexp.MustCompile(`(^|[\s,\[])-` + regexp.QuoteMeta(name) + `([^a-z0-9-]|$)`)
		if !re.MatchString(text) {
			t.Errorf("rendered page lacks -%s", name)
		}
		if !strings.Contains(roff, `\-`+strings.ReplaceAll(name, "-", `\-`)) {
			t.Errorf("roff lacks \\-%s", name)
		}
	}
}
