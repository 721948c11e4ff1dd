package cli

import (
	"runtime/debug"
	"strconv"
	"testing"

	"github.com/gangway-hpc/gangway/agent/wire"
)

func TestVersionText(t *testing.T) {
	proto := "protocol: " + strconv.Itoa(wire.Version) + "\n"
	for _, tc := range []struct {
		name            string
		version, commit string
		bi              *debug.BuildInfo
		want            string
	}{
		{"Go's VCS stamp, clean tree", "v1.2.0-3-gabc1234", "", &debug.BuildInfo{GoVersion: "go1.25.1", Settings: []debug.BuildSetting{
			{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "amd64"},
			{Key: "vcs.revision", Value: "abc1234def"}, {Key: "vcs.modified", Value: "false"}}},
			"launcher v1.2.0-3-gabc1234\ncommit:   abc1234def\n" + proto + "go:       go1.25.1 linux/amd64\n"},
		{"Go's VCS stamp, modified tree", "v1.2.0-dirty", "", &debug.BuildInfo{GoVersion: "go1.25.1", Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc1234def"}, {Key: "vcs.modified", Value: "true"}}},
			"launcher v1.2.0-dirty\ncommit:   abc1234def (modified)\n" + proto + "go:       go1.25.1\n"},
		{"the Makefile's commit wins", "v1.2.0", "0123abcd", &debug.BuildInfo{GoVersion: "go1.25.1", Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc1234def"}, {Key: "vcs.modified", Value: "true"}}},
			"launcher v1.2.0\ncommit:   0123abcd\n" + proto + "go:       go1.25.1\n"},
		{"plain go build without VCS", "", "", &debug.BuildInfo{GoVersion: "go1.25.0"},
			"launcher devel\ncommit:   unknown\n" + proto + "go:       go1.25.0\n"},
		{"no build info", "devel", "", nil, "launcher devel\ncommit:   unknown\n" + proto + "go:       unknown\n"},
		{"go install MODULE@VERSION", "", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/gangway-hpc/gangway", Version: "v0.9.0"}},
			"launcher v0.9.0\ncommit:   unknown\n" + proto + "go:       go1.26.8\n"},
		{"go build in the tree: (devel)", "", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			"launcher devel\ncommit:   unknown\n" + proto + "go:       go1.26.8\n"},
	} {
		if got := VersionText(tc.version, tc.commit, tc.bi); got != tc.want {
			t.Errorf("%s:\n%s\nwant\n%s", tc.name, got, tc.want)
		}
	}
}
