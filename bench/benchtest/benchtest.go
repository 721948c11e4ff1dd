// Package benchtest checks bench reports in tests of any package: it
// validates a JSON document against bench/report.schema.json with a small
// validator for the subset of JSON Schema 2020-12 that the schema uses.
//
// It imports no gangway package, so bench's own tests can use it too.
package benchtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// SchemaFile is the path of bench/report.schema.json in the source tree
// this package was compiled from.
func SchemaFile() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "report.schema.json"
	}
	return filepath.Join(filepath.Dir(file), "..", "report.schema.json")
}

// Decode parses JSON keeping numbers as json.Number, as Validate expects.
func Decode(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode JSON: %w", err)
	}
	if d.More() {
		return nil, errors.New("decode JSON: data after the document")
	}
	return v, nil
}

// LoadSchema reads and decodes a schema file.
func LoadSchema(path string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load schema: %w", err)
	}
	v, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("load schema %s: %w", path, err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("load schema %s: not a JSON object", path)
	}
	return m, nil
}

// Validate checks doc (from Decode) against schema and returns one message
// per violation, each starting with the JSON path ("$.metrics[0].value").
// It understands type, required, properties, additionalProperties (false),
// items, enum, minimum and local $ref to #/$defs/NAME; any other keyword
// is reported as a violation, so the schema cannot silently rely on
// something this does not check.
func Validate(schema map[string]any, doc any) []string {
	v := &validator{root: schema}
	v.check(schema, doc, "$")
	return v.errs
}

// ValidateReport checks a report written by bench.Report.WriteJSON against
// SchemaFile. The error is for an unreadable schema or report; violations
// are returned as messages.
func ValidateReport(data []byte) ([]string, error) {
	schema, err := LoadSchema(SchemaFile())
	if err != nil {
		return nil, err
	}
	doc, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	return Validate(schema, doc), nil
}

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
