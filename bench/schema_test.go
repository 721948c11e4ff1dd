package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// validator checks a JSON document against the subset of JSON Schema 2020-12
// that report.schema.json uses: type, required, properties,
// additionalProperties (false), items, enum, minimum, and local $ref to
// #/$defs/NAME. Any other keyword is an error, so the schema cannot silently
// rely on something this does not check.
type validator struct {
	root map[string]any
	errs []string
}

var schemaKeywords = []string{"$schema", "$id", "title", "description", "type", "required", "properties",
	"additionalProperties", "items", "enum", "minimum", "$ref", "$defs"}

func (v *validator) fail(path, format string, args ...any) {
	v.errs = append(v.errs, path+": "+fmt.Sprintf(format, args...))
}

func (v *validator) check(schema map[string]any, doc any, path string) {
	for k := range schema {
		if !slices.Contains(schemaKeywords, k) {
			v.fail(path, "schema keyword %q not supported by the test validator", k)
		}
	}
	if ref, ok := schema["$ref"].(string); ok {
		name, found := strings.CutPrefix(ref, "#/$defs/")
		defs, _ := v.root["$defs"].(map[string]any)
		sub, ok := defs[name].(map[string]any)
		if !found || !ok {
			v.fail(path, "unresolvable $ref %q", ref)
			return
		}
		v.check(sub, doc, path)
	}
	if typ, ok := schema["type"].(string); ok && !hasType(doc, typ) {
		v.fail(path, "want %s, got %T %v", typ, doc, doc)
		return
	}
	if enum, ok := schema["enum"].([]any); ok && !slices.ContainsFunc(enum, func(e any) bool { return fmt.Sprint(e) == fmt.Sprint(doc) }) {
		v.fail(path, "%v not in %v", doc, enum)
	}
	if minimum, ok := schema["minimum"].(json.Number); ok {
		n, isNum := doc.(json.Number)
		lo, _ := minimum.Float64()
		if f, err := n.Float64(); isNum && (err != nil || f < lo) {
			v.fail(path, "%v below minimum %v", doc, lo)
		}
	}
	if obj, ok := doc.(map[string]any); ok {
		props, _ := schema["properties"].(map[string]any)
		for _, r := range asSlice(schema["required"]) {
			if _, ok := obj[r.(string)]; !ok {
				v.fail(path, "missing required %q", r)
			}
		}
		for k, val := range obj {
			sub, ok := props[k].(map[string]any)
			if !ok {
				if schema["additionalProperties"] == false {
					v.fail(path, "property %q not in schema", k)
				}
				continue
			}
			v.check(sub, val, path+"."+k)
		}
	}
	if arr, ok := doc.([]any); ok {
		if items, ok := schema["items"].(map[string]any); ok {
			for i, e := range arr {
				v.check(items, e, path+"["+strconv.Itoa(i)+"]")
			}
		}
	}
}

func asSlice(x any) []any { s, _ := x.([]any); return s }

func hasType(doc any, typ string) bool {
	switch typ {
	case "object":
		_, ok := doc.(map[string]any)
		return ok
	case "array":
		_, ok := doc.([]any)
		return ok
	case "string":
		_, ok := doc.(string)
		return ok
	case "boolean":
		_, ok := doc.(bool)
		return ok
	case "number":
		_, ok := doc.(json.Number)
		return ok
	case "integer":
		n, ok := doc.(json.Number)
		_, err := strconv.ParseInt(string(n), 10, 64)
		return ok && err == nil
	}
	return false
}

func decode(t *testing.T, data []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func loadSchema(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile("report.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, data).(map[string]any)
}

func validateDoc(schema map[string]any, doc any) []string {
	v := &validator{root: schema}
	v.check(schema, doc, "$")
	return v.errs
}

// richReport exercises every optional field: hosts, stragglers, efficiency,
// finals, a global metric and a custom one.
func richReport(t *testing.T) Report {
	t.Helper()
	opts := DefaultOptions()
	opts.BaselineIPS = 1000
	opts.RankHosts = []string{"a", "a", "b", "b"}
	m, err := ParseMetric(`tokens=^tokens/s: (?P<value>\S+)$`, ScopeRank)
	if err != nil {
		t.Fatal(err)
	}
	opts.Metrics = []Recognizer{m}
	rep, err := AnalyzeFiles(t.Context(), []string{"testdata/tfcnn_mpirun.log", "testdata/horovod_hvdrun.log",
		"testdata/dllogger_tf1.log", "testdata/nccl_mpirun.log"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	rep.Meta = Meta{Command: []string{"python", "tf_cnn_benchmarks.py"}, Hosts: []string{"a", "b"}, Ranks: 4,
		Start: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), End: time.Date(2025, 1, 1, 0, 1, 0, 0, time.UTC), Version: "test"}
	rep.Lines.Dropped = 3
	return rep
}

func TestReportMatchesSchema(t *testing.T) {
	schema := loadSchema(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	rep := richReport(t)
	if err := rep.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("WriteJSON left %d files in its directory, want only report.json", len(entries))
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := decode(t, data)
	if errs := validateDoc(schema, doc); len(errs) > 0 {
		t.Fatalf("report does not match report.schema.json:\n%s", strings.Join(errs, "\n"))
	}
	// Every optional field the schema describes appears at least once.
	for _, key := range []string{`"ci95"`, `"slowest_rank"`, `"slowest_host"`, `"efficiency"`, `"final"`, `"deviation_pct"`} {
		if !bytes.Contains(data, []byte(key)) {
			t.Errorf("rich report lacks %s: the schema test does not cover it", key)
		}
	}
	var back Report
	if err := json.Unmarshal(data, &back); err != nil || back.Metrics[0].Value != rep.Metrics[0].Value {
		t.Errorf("round trip: %v", err)
	}
}

func TestSchemaValidatorRejects(t *testing.T) {
	schema := loadSchema(t)
	data, err := json.Marshal(richReport(t))
	if err != nil {
		t.Fatal(err)
	}
	mutations := map[string]func(m map[string]any){
		"missing required": func(m map[string]any) { delete(m, "lines") },
		"extra property":   func(m map[string]any) { m["extra"] = true },
		"bad enum":         func(m map[string]any) { metric0(m)["scope"] = "host" },
		"below minimum":    func(m map[string]any) { m["lines"].(map[string]any)["dropped"] = json.Number("-1") },
		"not integer":      func(m map[string]any) { metric0(m)["ranks_total"] = json.Number("1.5") },
		"wrong type":       func(m map[string]any) { metric0(m)["notes"] = "x" },
		"bad item":         func(m map[string]any) { metric0(m)["ranks"].([]any)[0].(map[string]any)["series"] = []any{1} },
	}
	for name, mutate := range mutations {
		doc := decode(t, data).(map[string]any)
		mutate(doc)
		if errs := validateDoc(schema, doc); len(errs) == 0 {
			t.Errorf("%s: validator accepted the document", name)
		}
	}
	if errs := validateDoc(map[string]any{"format": "x"}, "y"); len(errs) == 0 {
		t.Error("unsupported keyword accepted")
	}
}

func metric0(m map[string]any) map[string]any {
	return m["metrics"].([]any)[0].(map[string]any)
}

func TestWriteJSONError(t *testing.T) {
	err := Report{}.WriteJSON(filepath.Join(t.TempDir(), "missing-dir", "r.json"))
	if err == nil || !strings.Contains(err.Error(), "missing-dir") {
		t.Errorf("want an error naming the path, got %v", err)
	}
}
