package launcher

import (
	"os"
	"path/filepath"
	"testing"

	"gangway/launcher/cli"
)

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// parse is cli.Parse of args in an empty environment.
func parse(t *testing.T, args ...string) cli.Config {
	t.Helper()
	cfg, err := cli.Parse(args, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
