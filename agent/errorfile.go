package agent

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gangway/agent/wire"
)

// torchrun's root-cause contract: every rank gets TORCHELASTIC_ERROR_FILE,
// a path of its own for this job (a new job id per attempt), where
// torch.distributed.elastic's @record writes the exception that ended it.
// The agent reads the file of a rank that failed and sends it with the
// rank's Exit; the launcher shows it before the stderr tail.

// MaxErrorFile bounds the error file sent with an Exit.
const MaxErrorFile = 64 << 10

const errorFileVar = "TORCHELASTIC_ERROR_FILE"

// errorFileEnv makes rank's error file directory and returns the variable
// that names the file; nothing when the launcher's environment for the
// rank already sets it (-x).
func (s *session) errorFileEnv(r wire.RankSpec) []string {
	for _, kv := range r.Env {
		if strings.HasPrefix(kv, errorFileVar+"=") {
			return nil
		}
	}
	dir := filepath.Join(s.errorDir(), "rank."+strconv.Itoa(r.Rank))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil
	}
	path := filepath.Join(dir, "error.json")
	s.errMu.Lock()
	if s.errorFiles == nil {
		s.errorFiles = map[int]string{}
	}
	s.errorFiles[r.Rank] = path
	s.errMu.Unlock()
	return []string{errorFileVar + "=" + path}
}

// errorDir is the job's directory of error files on this host.
func (s *session) errorDir() string {
	return filepath.Join(os.TempDir(), "gangway-"+s.jobID+"-errors")
}

// readErrorFile returns what the rank's @record wrote, bounded; "" when
// it wrote nothing.
func (s *session) readErrorFile(rank int) string {
	s.errMu.Lock()
	path := s.errorFiles[rank]
	s.errMu.Unlock()
	if path == "" {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, MaxErrorFile))
	return string(b)
}

// removeErrorFiles removes the job's error files when the session ends.
func (s *session) removeErrorFiles() {
	s.errMu.Lock()
	made := s.errorFiles != nil
	s.errMu.Unlock()
	if made {
		_ = os.RemoveAll(s.errorDir())
	}
}
