package logging

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func TestNewFormats(t *testing.T) {
	for _, format := range []string{JSON, "anything else"} {
		var b bytes.Buffer
		New(format, zapcore.InfoLevel, &b).Named("agent").Info("serving", zap.String("addr", ":22122"))
		var rec map[string]any
		if err := json.Unmarshal(b.Bytes(), &rec); err != nil {
			t.Fatalf("format %q: not one JSON record: %q: %v", format, b.String(), err)
		}
		if rec["level"] != "info" || rec["logger"] != "agent" || rec["msg"] != "serving" || rec["addr"] != ":22122" {
			t.Errorf("format %q: record %v", format, rec)
		}
	}
	var b bytes.Buffer
	New(Console, zapcore.InfoLevel, &b).Named("launcher").Info("dialing", zap.Int("hosts", 2))
	line := b.String()
	if strings.HasPrefix(line, "{") || !strings.Contains(line, "\tINFO\tlauncher\tdialing\t{\"hosts\": 2}") {
		t.Errorf("console line %q", line)
	}
}

func TestNewLevel(t *testing.T) {
	for _, tc := range []struct {
		verbose bool
		quiet   zapcore.Level
		want    []string // messages written, of debug, info, warn
	}{
		{false, zapcore.WarnLevel, []string{"warn"}}, // launcher
		{true, zapcore.WarnLevel, []string{"debug", "info", "warn"}},
		{false, zapcore.InfoLevel, []string{"info", "warn"}}, // agent
		{true, zapcore.InfoLevel, []string{"debug", "info", "warn"}},
	} {
		var b bytes.Buffer
		log := New(JSON, Level(tc.verbose, tc.quiet), &b)
		log.Debug("debug")
		log.Info("info")
		log.Warn("warn")
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
			var rec struct{ Msg string }
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			got = append(got, rec.Msg)
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("verbose %v, quiet %v: wrote %q, want %q", tc.verbose, tc.quiet, got, tc.want)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		given    string
		terminal bool
		want     string
	}{
		{"", true, Console},
		{"", false, JSON},
		{JSON, true, JSON}, // -log-format wins
		{Console, false, Console},
		{"other", true, "other"}, // New reads anything else as JSON
	} {
		if got := Format(tc.given, tc.terminal); got != tc.want {
			t.Errorf("Format(%q, %v) = %q, want %q", tc.given, tc.terminal, got, tc.want)
		}
	}
}
