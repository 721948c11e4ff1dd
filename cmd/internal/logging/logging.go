// Package logging builds the logger of the gangway commands, so the
// launcher and the agent read -log-format and -v the same way.
package logging

import (
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Log formats for -log-format.
const (
	Console = "console" // zap's development console lines
	JSON    = "json"    // zap's production JSON records
)

// New returns a logger that writes records at level or above to w: console
// lines when format is Console, JSON records for any other format. Writes
// to w are serialised.
func New(format string, level zapcore.Level, w io.Writer) *zap.Logger {
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	if format == Console {
		enc = zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), zap.NewAtomicLevelAt(level)))
}

// Level is the level a command logs at: Debug with -v (verbose), quiet
// otherwise.
func Level(verbose bool, quiet zapcore.Level) zapcore.Level {
	if verbose {
		return zapcore.DebugLevel
	}
	return quiet
}

// Format is the log format a command uses: given when -log-format was
// given, else console lines (human times) for a person at a terminal and
// JSON records for everything else (journald, files, pipes).
func Format(given string, terminal bool) string {
	switch {
	case given != "":
		return given
	case terminal:
		return Console
	default:
		return JSON
	}
}
