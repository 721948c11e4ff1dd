package cli

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/agent/wire"
)

func TestParseEnvFile(t *testing.T) {
	for _, tt := range []struct {
		name, text string
		want       []EnvLine
		err        string
	}{
		{"plain", "A=1\nB=two words\n", []EnvLine{{"A", "1", 1}, {"B", "two words", 2}}, ""},
		{"comments, blanks, CRLF", "# c\n\n  # indented\r\nA=1\r\n", []EnvLine{{"A", "1", 4}}, ""},
		{"export", "export A=1\nexport\tB=2\n", []EnvLine{{"A", "1", 1}, {"B", "2", 2}}, ""},
		{"quotes: one enclosing pair", `A="x y"` + "\nB='z'\nC=\"half\nD='a'b'\n", []EnvLine{{"A", "x y", 1}, {"B", "z", 2}, {"C", `"half`, 3}, {"D", "a'b", 4}}, ""},
		{"nothing expanded, # kept", "A=$HOME # not a comment\nB=a\\nb\n", []EnvLine{{"A", "$HOME # not a comment", 1}, {"B", `a\nb`, 2}}, ""},
		{"= in value, empty value", "A=k=v\nB=\n", []EnvLine{{"A", "k=v", 1}, {"B", "", 2}}, ""},
		{"name alone", "A=1\nNAME\n", nil, "f:2: NAME has no value (want KEY=VALUE; -x NAME forwards the launcher's)"},
		{"blank before =", "A =1\n", nil, `f:1: want KEY=VALUE, got "A =1"`},
		{"bad name", "1A=1\n", nil, `f:1: want KEY=VALUE, got "1A=1"`},
		{"NUL", "A=x\x00y\n", nil, "f:1: A: the value holds a NUL byte"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseEnvFile("f", []byte(tt.text))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrUsage) {
					t.Fatalf("err %v, want a usage error with %q", err, tt.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func FuzzParseEnvFile(f *testing.F) {
	for _, s := range []string{
		"A=1\nB=two words\n", "# c\n\nexport A=\"x\"\r\n", "A='q'\nB=\"\nC=$X # y\n", "NAME\n", "A =1\n",
		"A=x\x00y", "export", "export =", "=", "'", "A=''", "\xff=1", "A=\xff\xfe", strings.Repeat("A=1\n", 100),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		lines, err := ParseEnvFile("f", b)
		if err != nil {
			if !errors.Is(err, ErrUsage) || !strings.HasPrefix(err.Error(), ErrUsage.Error()+": f:") {
				t.Fatalf("error without the file and line: %v", err)
			}
			return
		}
		n := strings.Count(string(b), "\n") + 1
		prev := 0
		for _, l := range lines {
			if !wire.ValidEnvName(l.Key) || strings.IndexByte(l.Value, 0) >= 0 || strings.ContainsAny(l.Value, "\n") {
				t.Fatalf("bad entry %+v", l)
			}
			if l.Line <= prev || l.Line > n {
				t.Fatalf("line %d after %d (of %d)", l.Line, prev, n)
			}
			prev = l.Line
		}
	})
}
