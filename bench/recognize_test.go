package bench

import (
	"errors"
	"testing"
	"time"
)

// recognizeAll runs every built-in recogniser and returns the matches.
func recognizeAll(line string) []Sample {
	var out []Sample
	for _, r := range Builtin() {
		if s, ok := r.Recognize([]byte(line)); ok {
			out = append(out, s)
		}
	}
	return out
}

func TestBuiltinRecognizers(t *testing.T) {
	ts := time.Date(2021, 3, 24, 17, 24, 33, 107961000, time.UTC)
	tests := []struct {
		name, line string
		metric     *Metric // nil: no recogniser may match
		kind       Kind
		step       int
		value      float64
		time       time.Time
	}{
		// tf_cnn_benchmarks
		{"tf step", "100\timages/sec: 2840.1 +/- 3.5 (jitter = 10.2)\t7.457", MetricTFCNN, KindStep, 100, 2840.1, time.Time{}},
		{"tf step top1/top5", "10\timages/sec: 12.5 +/- 0.1 (jitter = 0.3)\t7.457\t0.001\t0.005", MetricTFCNN, KindStep, 10, 12.5, time.Time{}},
		{"tf step ewma", "20\timages/sec: 2840.1\t7.457", MetricTFCNN, KindStep, 20, 2840.1, time.Time{}},
		{"tf step nan loss", "1\timages/sec: 99.0 +/- 0.0 (jitter = 0.0)\tnan", MetricTFCNN, KindStep, 1, 99, time.Time{}},
		{"tf total", "total images/sec: 2838.46", MetricTFCNN, KindFinal, -1, 2838.46, time.Time{}},
		{"tf total trailing space", "total images/sec: 2838.46  ", MetricTFCNN, KindFinal, -1, 2838.46, time.Time{}},
		{"tf step no loss", "100\timages/sec: 2840.1 +/- 3.5 (jitter = 10.2)", nil, 0, 0, 0, time.Time{}},
		{"tf step spaces not tabs", "100 images/sec: 2840.1 7.457", nil, 0, 0, 0, time.Time{}},
		{"tf total with junk", "total images/sec: 2838.46 (approx)", nil, 0, 0, 0, time.Time{}},
		{"tf total overflow", "total images/sec: 1e999", nil, 0, 0, 0, time.Time{}},
		{"tf total inf", "total images/sec: inf", nil, 0, 0, 0, time.Time{}},
		{"tf step huge step", "99999999999999999999\timages/sec: 1.0\t1.0", nil, 0, 0, 0, time.Time{}},
		// Horovod
		{"hvd iter", "Iter #3: 301.2 img/sec per GPU", MetricHorovod, KindStep, 3, 301.2, time.Time{}},
		{"hvd iter cpu", "Iter #0: 1e2 img/sec per CPU", MetricHorovod, KindStep, 0, 100, time.Time{}},
		{"hvd mean", "Img/sec per GPU: 300.9 +-2.3", MetricHorovod, KindFinal, -1, 300.9, time.Time{}},
		{"hvd total", "Total img/sec on 16 GPU(s): 4814.4 +-37.4", MetricHorovodTotal, KindFinal, -1, 4814.4, time.Time{}},
		{"hvd iter tpu", "Iter #3: 301.2 img/sec per TPU", nil, 0, 0, 0, time.Time{}},
		{"hvd total no paren", "Total img/sec on 16 GPUs: 4814.4 +-37.4", nil, 0, 0, 0, time.Time{}},
		{"hvd mean spaced pm", "Img/sec per GPU: 300.9 +- 2.3", nil, 0, 0, 0, time.Time{}},
		// DLLogger
		{"dll tf1 step", "DLL 2021-03-24 17:24:33.107961 - (0, 120) total_ips : 2712.6367", MetricDLLogger, KindStep, 120, 2712.6367, ts},
		{"dll tf1 final", "DLL 2021-03-24 17:24:33.107961 - () train_throughput : 2750.125 images/s", MetricDLLogger, KindFinal, -1, 2750.125, ts},
		{"dll summary", "DLL 2021-03-24 17:24:33.107961 - Summary: train.loss : 6.90000  train.compute_ips : 2950.30 img/s train.total_ips : 2901.77 img/s",
			MetricDLLogger, KindFinal, -1, 2901.77, ts},
		{"dll pytorch step", "DLL 2021-03-24 17:24:33 - Epoch: 0 Iteration: 50  train.loss : 6.9  train.compute_ips : 2950.30 img/s train.total_ips : 2901.77 img/s",
			MetricDLLogger, KindStep, 50, 2901.77, ts.Truncate(time.Second)},
		{"dll compute_ips only", "DLL 2021-03-24 17:24:33 - (0, 1) train.compute_ips : 2950.30 img/s", nil, 0, 0, 0, time.Time{}},
		{"dll None", "DLL 2021-03-24 17:24:33 - (0, 1) total_ips : None", nil, 0, 0, 0, time.Time{}},
		{"dll nan", "DLL 2021-03-24 17:24:33 - (0, 1) total_ips : nan", nil, 0, 0, 0, time.Time{}},
		{"dll no timestamp", "DLL - (0, 1) total_ips : 5", nil, 0, 0, 0, time.Time{}},
		{"dll prefixed name", "DLL 2021-03-24 17:24:33 - (0, 1) xtotal_ips : 5", nil, 0, 0, 0, time.Time{}},
		// nccl-tests
		{"nccl row", "     8388608       2097152     float     sum      -1   180.40   46.50   81.37       0   178.90   46.89   82.06       0",
			MetricNCCL, KindStep, 8388608, (81.37 + 82.06) / 2, time.Time{}},
		{"nccl row N/A", "        1024           256     float     sum      -1    20.10    0.05    0.10     N/A    19.90    0.05    0.30     N/A",
			MetricNCCL, KindStep, 1024, 0.2, time.Time{}},
		{"nccl avg", "# Avg bus bandwidth    : 41.0517", MetricNCCL, KindFinal, -1, 41.0517, time.Time{}},
		{"nccl avg nan", "# Avg bus bandwidth    : nan", nil, 0, 0, 0, time.Time{}},
		{"nccl header", "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong", nil, 0, 0, 0, time.Time{}},
		{"nccl short row", "     8388608       2097152     float     sum      -1   180.40   46.50   81.37       0", nil, 0, 0, 0, time.Time{}},
		{"nccl out of bounds", "# Out of bounds values : 0 OK", nil, 0, 0, 0, time.Time{}},
		// generic
		{"generic", "Total images/sec = 1234.56", MetricTotal, KindFinal, -1, 1234.56, time.Time{}},
		{"generic tight", "Total images/sec=7", MetricTotal, KindFinal, -1, 7, time.Time{}},
		{"generic colon", "Total images/sec: 7", nil, 0, 0, 0, time.Time{}},
		// noise
		{"empty", "", nil, 0, 0, 0, time.Time{}},
		{"number", "12345", nil, 0, 0, 0, time.Time{}},
		{"prose", "throughput is 12 img/sec per GPU roughly", nil, 0, 0, 0, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := recognizeAll(tt.line)
			if tt.metric == nil {
				if len(got) != 0 {
					t.Fatalf("want no match, got %+v", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("want exactly one match, got %+v", got)
			}
			s := got[0]
			if s.Metric != tt.metric || s.Kind != tt.kind || s.Step != tt.step || !near(s.Value, tt.value) || !s.Time.Equal(tt.time) {
				t.Errorf("got %s kind=%d step=%d value=%v time=%v; want %s kind=%d step=%d value=%v time=%v",
					s.Metric.Name, s.Kind, s.Step, s.Value, s.Time, tt.metric.Name, tt.kind, tt.step, tt.value, tt.time)
			}
		})
	}
}

func near(a, b float64) bool {
	d := a - b
	if d < 0 {
		d = -d
	}
	return d <= 1e-9*max(1, a, -a, b, -b)
}

func TestMayMatchBuiltinCoversRecognizers(t *testing.T) {
	// Every line some built-in recognises must pass the prefilter, or the
	// Collector would lose it.
	for _, line := range []string{
		"1\timages/sec: 1.0\t1.0", "total images/sec: 1", "Iter #0: 1 img/sec per GPU", "Img/sec per CPU: 1 +-1",
		"Total img/sec on 2 CPU(s): 2 +-1", "DLL 2021-03-24 17:24:33 - () train_throughput : 1", "# Avg bus bandwidth : 1",
		"   8  2  float  sum  -1  1  1  1  0  1  1  1  0", "Total images/sec = 1",
	} {
		if len(recognizeAll(line)) != 1 {
			t.Errorf("%q: not recognised", line)
		}
		if !mayMatchBuiltin([]byte(line)) {
			t.Errorf("%q: prefilter rejects a recognised line", line)
		}
	}
	if mayMatchBuiltin([]byte("epoch 3: loss 0.25, lr 0.1")) {
		t.Error("prefilter passes a line no recogniser wants")
	}
}

func TestStripTag(t *testing.T) {
	tests := []struct {
		line string
		rank int
		rest string
		ok   bool
	}{
		{"[1,3]<stdout>:Iter #1: 5 img/sec per GPU", 3, "Iter #1: 5 img/sec per GPU", true},
		{"[12,0]<stderr>:x", 0, "x", true},
		{"[1,3]<stdout>:", 3, "", true},
		{"[7]<stdout>:total images/sec: 1", 7, "total images/sec: 1", true},
		{"[7]<stderr>: spaced", 7, " spaced", true},
		{"[15] 100\timages/sec: 1.0\t1.0", 15, "100\timages/sec: 1.0\t1.0", true},
		{"[0] ", 0, "", true},
		{"untagged line", 0, "untagged line", false},
		{"[3]no space", 0, "[3]no space", false},
		{"[a] x", 0, "[a] x", false},
		{"[] x", 0, "[] x", false},
		{"[1,]<stdout>:x", 0, "[1,]<stdout>:x", false},
		{"[1,2] x", 0, "[1,2] x", false},
		{"[1,2]<stdin>:x", 0, "[1,2]<stdin>:x", false},
		{"[1234567890] x", 0, "[1234567890] x", false},
		{"[123456789] x", 123456789, "x", true},
		{"[", 0, "[", false},
	}
	for _, tt := range tests {
		rank, rest, ok := StripTag([]byte(tt.line))
		if rank != tt.rank || string(rest) != tt.rest || ok != tt.ok {
			t.Errorf("StripTag(%q) = %d, %q, %v; want %d, %q, %v", tt.line, rank, rest, ok, tt.rank, tt.rest, tt.ok)
		}
	}
}

func TestParseMetric(t *testing.T) {
	tests := []struct {
		spec    string
		scope   Scope
		line    string
		match   bool
		step    int
		value   float64
		wantErr bool
	}{
		{spec: `tokens=tokens/s: (?P<value>\S+)`, line: "step 3 tokens/s: 1.5e4", match: true, step: -1, value: 15000},
		{spec: `tok=^step (?P<step>\d+) tok/s=(?P<value>[\d.]+)$`, scope: ScopeGlobal, line: "step 42 tok/s=99.5", match: true, step: 42, value: 99.5},
		{spec: `tok=^step (?P<step>\d+) tok/s=(?P<value>[\d.]+)$`, line: "step 42 tok/s=", match: false},
		{spec: `x=v=(?P<value>\S+)`, line: "v=abc", match: false},
		{spec: `x=v=(?P<value>\S+)`, line: "v=NaN", match: false},
		{spec: `x=a=b=(?P<value>\d+)`, line: "a=b=3", match: true, step: -1, value: 3},
		{spec: `novalue=(\d+)`, wantErr: true},
		{spec: `noequals`, wantErr: true},
		{spec: `=(?P<value>\d+)`, wantErr: true},
		{spec: `bad name=(?P<value>\d+)`, wantErr: true},
		{spec: `x=(?P<value>\d+`, wantErr: true},
		{spec: `nccl_busbw=(?P<value>\d+)`, wantErr: true},
		{spec: `x=(?P<value>\d+)`, scope: Scope(7), wantErr: true},
	}
	for _, tt := range tests {
		r, err := ParseMetric(tt.spec, tt.scope)
		if tt.wantErr {
			if err == nil || !errors.Is(err, ErrBadMetric) {
				t.Errorf("ParseMetric(%q) error = %v, want ErrBadMetric", tt.spec, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("ParseMetric(%q): %v", tt.spec, err)
		}
		if m := r.Metrics(); len(m) != 1 || m[0].Scope != tt.scope {
			t.Errorf("ParseMetric(%q) metrics %+v, want one with scope %v", tt.spec, m, tt.scope)
		}
		s, ok := r.Recognize([]byte(tt.line))
		if ok != tt.match || (ok && (s.Step != tt.step || s.Value != tt.value || s.Kind != KindStep)) {
			t.Errorf("%q on %q = %+v, %v; want step %d value %v, %v", tt.spec, tt.line, s, ok, tt.step, tt.value, tt.match)
		}
	}
}

func TestParseScope(t *testing.T) {
	for in, want := range map[string]Scope{"rank": ScopeRank, "global": ScopeGlobal} {
		if got, err := ParseScope(in); err != nil || got != want || got.String() != in {
			t.Errorf("ParseScope(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseScope("host"); err == nil {
		t.Error("ParseScope(host): want error")
	}
}
