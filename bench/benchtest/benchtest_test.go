package benchtest

import (
	"strings"
	"testing"
)

// The validator itself is tested against real reports in bench's
// schema_test.go; this checks the pieces other packages rely on.
func TestValidateReport(t *testing.T) {
	if _, err := LoadSchema(SchemaFile()); err != nil {
		t.Fatalf("SchemaFile %s: %v", SchemaFile(), err)
	}
	errs, err := ValidateReport([]byte(`{"schema": "gangway-bench-report/v1", "metrics": [{"name": 1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(errs, "\n")
	for _, want := range []string{`$: missing required "meta"`, `$.metrics[0].name: want string`, `$.metrics[0]: missing required "value"`} {
		if !strings.Contains(got, want) {
			t.Errorf("violations lack %q:\n%s", want, got)
		}
	}
	if _, err := ValidateReport([]byte(`{} {}`)); err == nil {
		t.Error("two documents accepted")
	}
}
