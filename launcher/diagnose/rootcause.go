package diagnose

import (
	"encoding/json"
	"strings"
)

// rootCause reads what a rank's torch @record wrote to its
// TORCHELASTIC_ERROR_FILE: the exception ("RuntimeError: boom") and the
// last frames of its traceback (up to maxFrames lines, innermost last).
// ok is false when the file is empty or not torch's format. Both the
// current format ({"message": {"message": ..., "extraInfo":
// {"py_callstack": ...}}}) and the older one ({"message": "..."}) are read.
func rootCause(file string, maxFrames int) (exception string, frames []string, ok bool) {
	var top struct {
		Message json.RawMessage `json:"message"`
	}
	if json.Unmarshal([]byte(file), &top) != nil || len(top.Message) == 0 {
		return "", nil, false
	}
	var msg struct {
		Message   string `json:"message"`
		ExtraInfo struct {
			Callstack string `json:"py_callstack"`
		} `json:"extraInfo"`
	}
	if json.Unmarshal(top.Message, &exception) == nil {
		return firstLine(exception), nil, exception != ""
	}
	if json.Unmarshal(top.Message, &msg) != nil || msg.Message == "" {
		return "", nil, false
	}
	var lines []string
	for _, l := range strings.Split(msg.ExtraInfo.Callstack, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	// The traceback ends with the exception line itself, already shown.
	if n := len(lines); n > 0 && strings.TrimSpace(lines[n-1]) == strings.TrimSpace(firstLine(msg.Message)) {
		lines = lines[:n-1]
	}
	return firstLine(msg.Message), lines[max(0, len(lines)-maxFrames):], true
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
