// Package manpage writes a roff man page from a command's --help text, so
// the man pages say what -h says: the usage line becomes the SYNOPSIS,
// the paragraphs before the options the DESCRIPTION, each "Heading:"
// block of "  -flag ..." lines a subsection of OPTIONS (stdlib flag's
// PrintDefaults layout is read too), an "Exit status:" paragraph the
// EXIT STATUS, and any other indented block is kept as it is.
package manpage

import (
	"fmt"
	"io"
	"regexp"
	"strings"
)

// Page names the command and its one-line summary.
type Page struct {
	Name    string // "launcher"
	Summary string // for NAME
	Version string // in the footer
	SeeAlso []string
}

// Option is one entry of OPTIONS.
type Option struct {
	Tag  string // "-H, -host LIST"
	Desc string
}

// Section is a heading and what follows it.
type Section struct {
	Heading string
	Options []Option
	Text    []string // verbatim lines when it lists no options
}

// Doc is help text split into its parts.
type Doc struct {
	Synopsis    string
	Description []string // paragraphs
	Sections    []Section
	ExitStatus  string
}

var (
	headingRE = regexp.MustCompile(`^[A-Z][^\n]*:$`)
	// "  -H, -host LIST           [user@]host..." (two spaces or more
	// between the tag and its description) or "  -listen string".
	optionRE = regexp.MustCompile(`^  (-\S.*?)(?:\s{2,}(\S.*))?$`)
)

// descCol is the column of option descriptions in cli.Usage (the launcher's --help).
const descCol = 27

// Parse splits help text into a Doc.
func Parse(help string) Doc {
	var d Doc
	var para []string
	flush := func() {
		if len(para) > 0 {
			d.Description = append(d.Description, strings.Join(para, " "))
			para = nil
		}
	}
	var sec *Section
	lines := strings.Split(strings.TrimRight(help, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if tag, desc, ok := strings.Cut(l, "\t"); ok && strings.HasPrefix(l, "  -") {
			l = tag + "  " + desc // flag's "  -v\tusage" for one-letter switches
		}
		switch {
		case strings.HasPrefix(l, "usage: "):
			flush()
			d.Synopsis = strings.TrimPrefix(l, "usage: ")
		case strings.TrimSpace(l) == "":
			flush()
			if sec != nil && len(sec.Options) == 0 && len(sec.Text) > 0 {
				sec = nil // a verbatim block ends at a blank line
			}
		case headingRE.MatchString(l):
			flush()
			d.Sections = append(d.Sections, Section{Heading: strings.TrimSuffix(l, ":")})
			sec = &d.Sections[len(d.Sections)-1]
		case strings.HasPrefix(l, "Exit status:"):
			flush()
			var p []string
			for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
				p = append(p, strings.TrimSpace(lines[i]))
			}
			d.ExitStatus = strings.TrimSpace(strings.TrimPrefix(strings.Join(p, " "), "Exit status:"))
		case sec != nil && optionRE.MatchString(l):
			m := optionRE.FindStringSubmatch(l)
			tag, desc := strings.TrimSpace(m[1]), m[2]
			// A tag that fills its column leaves one space before the
			// description, which starts in the column of the
			// continuation lines.
			if desc == "" && len(l) > descCol && l[descCol-1] == ' ' && l[descCol] != ' ' && l[descCol] != '-' {
				tag, desc = strings.TrimSpace(l[:descCol]), l[descCol:]
			}
			sec.Options = append(sec.Options, Option{Tag: tag, Desc: desc})
		case sec != nil && len(sec.Options) > 0 && strings.HasPrefix(l, "   "):
			o := &sec.Options[len(sec.Options)-1]
			o.Desc = strings.TrimSpace(o.Desc + " " + strings.TrimSpace(l))
		case sec != nil && strings.HasPrefix(l, " "):
			sec.Text = append(sec.Text, l)
		default:
			sec = nil
			para = append(para, strings.TrimSpace(l))
		}
	}
	flush()
	return d
}

// Write writes p's man page (section 1) from help to w.
func Write(w io.Writer, p Page, help string) error {
	d := Parse(help)
	var b strings.Builder
	fmt.Fprintf(&b, ".TH %s 1 \"\" \"gangway %s\" \"User Commands\"\n", strings.ToUpper(p.Name), esc(p.Version))
	fmt.Fprintf(&b, ".SH NAME\n%s \\- %s\n", p.Name, esc(p.Summary))
	fmt.Fprintf(&b, ".SH SYNOPSIS\n.B %s\n%s\n", p.Name, esc(strings.TrimSpace(strings.TrimPrefix(d.Synopsis, p.Name))))
	b.WriteString(".SH DESCRIPTION\n")
	for i, para := range d.Description {
		if i > 0 {
			b.WriteString(".PP\n")
		}
		b.WriteString(esc(para) + "\n")
	}
	opts := false
	for _, s := range d.Sections {
		if len(s.Options) == 0 {
			fmt.Fprintf(&b, ".SS %s\n.nf\n", esc(s.Heading))
			for _, l := range s.Text {
				b.WriteString(esc(strings.TrimPrefix(l, "  ")) + "\n")
			}
			b.WriteString(".fi\n")
			continue
		}
		if !opts {
			b.WriteString(".SH OPTIONS\n")
			opts = true
		}
		if s.Heading != "Options" {
			fmt.Fprintf(&b, ".SS %s\n", esc(s.Heading))
		}
		for _, o := range s.Options {
			fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", esc(o.Tag), esc(o.Desc))
		}
	}
	if d.ExitStatus != "" {
		fmt.Fprintf(&b, ".SH EXIT STATUS\n%s\n", esc(d.ExitStatus))
	}
	if len(p.SeeAlso) > 0 {
		var refs []string
		for _, s := range p.SeeAlso {
			refs = append(refs, ".BR "+s+" (1)")
		}
		fmt.Fprintf(&b, ".SH SEE ALSO\n%s\n", strings.Join(refs, " ,\n"))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// esc makes text safe in roff: backslashes escaped, dashes as \- (so
// options render as the ASCII hyphen one can paste), no line starting
// with a control character.
func esc(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}
