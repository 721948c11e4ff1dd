package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/bench/benchtest"
)

func decode(t *testing.T, data []byte) any {
	t.Helper()
	v, err := benchtest.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func loadSchema(t *testing.T) map[string]any {
	t.Helper()
	schema, err := benchtest.LoadSchema("report.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return schema
}

func validateDoc(schema map[string]any, doc any) []string {
	return benchtest.Validate(schema, doc)
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
	rep.Failures = []Failure{
		{Rank: 1, Host: "a", Pid: 42, Blamed: true, Cause: "rank 1 on a (pid 42) exited with code 1", ExitCode: 1,
			StderrTail: []string{"RuntimeError: boom"}, RootCause: &RootCause{Exception: "RuntimeError: boom", Traceback: []string{`  File "t.py", line 3`}}},
		{Rank: 3, Host: "b", Pid: 43, Cause: "rank 3 on b (pid 43) was killed by signal 9 (SIGKILL), exit code 137", ExitCode: 137,
			Signal: 9, SignalName: "SIGKILL", StderrTail: []string{}},
	}
	rep.Lost = []string{"lost the agent on c: EOF"}
	rep.Selftest = &Selftest{Bytes: 64 << 20, WithinSec: 2, MedianMBps: 2000, Fraction: 1.0 / 3, Outliers: []string{"b"}, Stopped: true,
		Pairs: []SelftestPair{{A: "a", B: "b", AToBMBps: 11.5, BToAMBps: 0, Err: "b -> a: connect: refused"}},
		Hosts: []SelftestHost{{Name: "a", MBps: 2000, Pairs: 1}, {Name: "b", MBps: 0, Pairs: 1, Outlier: true}}}
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
	for _, key := range []string{`"ci95"`, `"slowest_rank"`, `"slowest_host"`, `"efficiency"`, `"final"`, `"deviation_pct"`, `"stopped"`, `"err"`} {
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
