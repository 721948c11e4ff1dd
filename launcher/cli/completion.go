package cli

import (
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// FlagNames lists every flag the launcher takes, sorted, without dashes.
func FlagNames() []string {
	var c Config
	names := flagNames(c.flagSet())
	slices.Sort(names)
	return names
}

// flagSpec is what completion needs of a flag.
type flagSpec struct {
	name    string
	usage   string
	words   int      // values after it: 0 (a switch), 1, or 2 (-mca KEY VALUE)
	choices []string // its fixed values, from Usage ("-map-by slot|node")
}

// choicesRE finds "-name a|b|c" in Usage.
var choicesRE = regexp.MustCompile(`(?m)-([a-z][a-z0-9-]*)(?:\[=|[ =])([a-z0-9]+(?:\|[a-z0-9]+)+)\]?`)

func flagSpecs() []flagSpec {
	var c Config
	fs := c.flagSet()
	choices := map[string][]string{}
	for _, m := range choicesRE.FindAllStringSubmatch(Usage, -1) {
		if _, ok := choices[m[1]]; !ok {
			choices[m[1]] = strings.Split(m[2], "|")
		}
	}
	var specs []flagSpec
	fs.VisitAll(func(f *flag.Flag) {
		s := flagSpec{name: f.Name, usage: f.Usage, words: 1, choices: choices[f.Name]}
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
			s.words, s.choices = 0, nil // -drop-caches[=1|2|3] takes its value only after =
		}
		if twoWordFlags[f.Name] {
			s.words = 2
		}
		specs = append(specs, s)
	})
	return specs
}

// Completion returns the launcher's completion script for shell ("bash" or
// "zsh"), written from the registered flags: `launcher --completion bash`.
func Completion(shell string) (string, error) {
	switch shell {
	case "bash":
		return bashCompletion(flagSpecs()), nil
	case "zsh":
		return zshCompletion(flagSpecs()), nil
	}
	return "", fmt.Errorf("%w: --completion takes bash or zsh, not %q", ErrUsage, shell)
}

func bashCompletion(specs []flagSpec) string {
	var names, one, two []string
	var cases strings.Builder
	for _, s := range specs {
		// Options take one or two dashes; offer both, so that --np<TAB>
		// completes as -np<TAB> does.
		names = append(names, "-"+s.name, "--"+s.name)
		switch s.words {
		case 1:
			one = append(one, s.name)
		case 2:
			two = append(two, s.name)
		}
		if len(s.choices) > 0 {
			fmt.Fprintf(&cases, "\t-%s|--%s) COMPREPLY=($(compgen -W '%s' -- \"$cur\")); return ;;\n", s.name, s.name, strings.Join(s.choices, " "))
		}
	}
	return `# bash completion for launcher (gangway), written by launcher --completion bash.
_launcher() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
	local one=' ` + strings.Join(one, " ") + ` ' two=' ` + strings.Join(two, " ") + ` '
	local i w n
	# Options end at PROGRAM (or --): from there on, complete PROGRAM's words.
	for ((i = 1; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		case $w in
		--) ;&
		[!-]*)
			[ "$w" = -- ] && i=$((i + 1))
			if [ "$i" -lt "$COMP_CWORD" ]; then
				if declare -F _command_offset >/dev/null; then _command_offset "$i"; fi
			else
				COMPREPLY=($(compgen -c -- "$cur"))
			fi
			return ;;
		*=*) ;;
		*)
			n=${w#-}; n=${n#-}
			if [[ $one == *" $n "* ]]; then i=$((i + 1)); elif [[ $two == *" $n "* ]]; then i=$((i + 2)); fi ;;
		esac
	done
	case $prev in
` + cases.String() + `	esac
	if [ "$i" -gt "$COMP_CWORD" ]; then
		return # an option's value: files, by -o default
	fi
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W '` + strings.Join(names, " ") + `' -- "$cur"))
		return
	fi
	COMPREPLY=($(compgen -c -- "$cur"))
}
complete -o default -F _launcher launcher
`
}

func zshCompletion(specs []flagSpec) string {
	var b strings.Builder
	b.WriteString("#compdef launcher\n# zsh completion for launcher (gangway), written by launcher --completion zsh.\n_arguments -S \\\n")
	// In the explanation only brackets need a backslash; quotes close
	// the single-quoted word.
	esc := strings.NewReplacer(`'`, `'\''`, `[`, `\[`, `]`, `\]`)
	for _, s := range specs {
		desc := esc.Replace(s.usage)
		val := ""
		switch {
		case len(s.choices) > 0:
			val = ":value:(" + strings.Join(s.choices, " ") + ")"
		case s.words == 1:
			val = ":value:_files"
		case s.words == 2:
			val = ":key: :value: "
		}
		fmt.Fprintf(&b, "  '(-%[1]s --%[1]s)'{-%[1]s,--%[1]s}'[%[2]s]%[3]s' \\\n", s.name, desc, val)
	}
	b.WriteString("  '(-)1:program:_command_names -e' \\\n  '(-)*::program arguments:_normal'\n")
	return b.String()
}
