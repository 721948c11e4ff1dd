package cli

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// DevelVersion is the version of a binary built without the Makefile's
// stamp (-ldflags -X main.version=$(git describe)): a plain go build.
const DevelVersion = "devel"

// VersionText is --version's output: the launcher's version, the commit
// it was built from (the Makefile's stamp, else the Go toolchain's VCS
// stamp with "(modified)" when the tree had changes; a git worktree or
// -buildvcs=false leaves none), the protocol version its agents must
// speak, and the Go that built it, one per line. bi is
// debug.ReadBuildInfo's, nil when the binary has none.
func VersionText(version, commit string, bi *debug.BuildInfo) string {
	if (version == "" || version == DevelVersion) && bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		version = bi.Main.Version // go install MODULE/cmd/launcher@VERSION
	}
	if version == "" {
		version = DevelVersion
	}
	stamped := commit != ""
	if !stamped {
		commit = "unknown"
	}
	goVersion := "unknown"
	var goos, goarch string
	if bi != nil {
		goVersion = bi.GoVersion
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if !stamped {
					commit = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			case "GOOS":
				goos = s.Value
			case "GOARCH":
				goarch = s.Value
			}
		}
		if modified && !stamped && commit != "unknown" {
			commit += " (modified)"
		}
	}
	if goos != "" && goarch != "" {
		goVersion += " " + goos + "/" + goarch
	}
	var b strings.Builder
	fmt.Fprintf(&b, "launcher %s\n", version)
	fmt.Fprintf(&b, "commit:   %s\n", commit)
	fmt.Fprintf(&b, "protocol: %d\n", wire.Version)
	fmt.Fprintf(&b, "go:       %s\n", goVersion)
	return b.String()
}
