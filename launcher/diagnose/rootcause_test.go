package diagnose

import (
	"reflect"
	"testing"
)

func TestRootCause(t *testing.T) {
	current := `{"message": {"message": "RuntimeError: loss is nan at step 12", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py\", line 346, in wrapper\n    return f(*args, **kwargs)\n  File \"/job/train.py\", line 30, in main\n    step(model)\n  File \"/job/train.py\", line 12, in step\n    raise RuntimeError(f\"loss is nan at step {n}\")\nRuntimeError: loss is nan at step 12\n", "timestamp": "1763900000"}}}`
	for _, tt := range []struct {
		name      string
		file      string
		max       int
		exception string
		frames    []string
		ok        bool
	}{
		{"torch's format", current, 4, "RuntimeError: loss is nan at step 12", []string{
			`  File "/job/train.py", line 30, in main`, `    step(model)`,
			`  File "/job/train.py", line 12, in step`, `    raise RuntimeError(f"loss is nan at step {n}")`}, true},
		{"fewer frames", current, 2, "RuntimeError: loss is nan at step 12", []string{
			`  File "/job/train.py", line 12, in step`, `    raise RuntimeError(f"loss is nan at step {n}")`}, true},
		{"older format", `{"message": "ValueError: bad shape\nmore"}`, 4, "ValueError: bad shape", nil, true},
		{"empty", "", 4, "", nil, false},
		{"not json", "Traceback...", 4, "", nil, false},
		{"no message", `{"other": 1}`, 4, "", nil, false},
	} {
		exc, frames, ok := rootCause(tt.file, tt.max)
		if exc != tt.exception || !reflect.DeepEqual(frames, tt.frames) || ok != tt.ok {
			t.Errorf("%s: %q %q %v, want %q %q %v", tt.name, exc, frames, ok, tt.exception, tt.frames, tt.ok)
		}
	}
}

func FuzzRootCause(f *testing.F) {
	f.Add(`{"message": {"message": "E: x", "extraInfo": {"py_callstack": "a\nb\nE: x\n"}}}`)
	f.Add(`{"message": "E: x"}`)
	f.Add(`{"message": {}}`)
	f.Fuzz(func(t *testing.T, file string) {
		exc, frames, ok := rootCause(file, 6)
		if !ok && (exc != "" || frames != nil) || len(frames) > 6 {
			t.Fatalf("rootCause(%q) = %q %q %v", file, exc, frames, ok)
		}
	})
}
