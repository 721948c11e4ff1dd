package bench

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLeafPackage keeps bench a leaf: the standard library and gonum only.
func TestLeafPackage(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			stdlib := !strings.Contains(first, ".") && first != "gangway"
			gonum := strings.HasPrefix(path, "gonum.org/v1/gonum/") || strings.HasPrefix(path, "gonum.org/v1/plot")
			if !stdlib && !gonum {
				t.Errorf("%s imports %s: bench may import only the standard library and gonum", f, path)
			}
		}
	}
}
