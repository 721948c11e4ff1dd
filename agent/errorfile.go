package agent

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// torchrun's root-cause contract: every rank gets TORCHELASTIC_ERROR_FILE,
// a path of its own for this job (a new job id per attempt), where
// torch.distributed.elastic's @record writes the exception that ended it.
// The agent reads the file of a rank that failed and sends it with the
// rank's Exit; the launcher shows it before the stderr tail.

// MaxErrorFile bounds the error file sent with an Exit.
const MaxErrorFile = 64 << 10

const errorFileVar = "TORCHELASTIC_ERROR_FILE"

// errorFile returns the path of rank's error file (rankEnv sets
// TORCHELASTIC_ERROR_FILE to it), and makes the job's directory for them
// on the first call; "" when the launcher's environment for the rank
// (shared, the job's StartJob.Env, or the rank's own) already sets the
// variable (-x), or the directory could not be made.
//
// The job's directory has a random name. Ranks running as the agent's own
// user write in it directly; ranks running as another user get one
// directory of theirs inside it, which belongs to them, in a job
// directory they may only pass through. Either way one or two mkdirs per
// job, not one per rank: all of a session's ranks are one user's.
func (s *session) errorFile(shared []string, r wire.RankSpec) string {
	for _, kv := range slices.Concat(shared, r.Env) {
		if strings.HasPrefix(kv, errorFileVar+"=") {
			return ""
		}
	}
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.errorDir == "" {
		if s.errorRoot != "" {
			return "" // making it failed for an earlier rank
		}
		s.a.sweepErrorDirs(s.log)
		root, err := os.MkdirTemp(errorFileBase(), errorDirPrefix()+s.jobID+"-errors-")
		if err != nil {
			s.errorRoot = os.DevNull
			return ""
		}
		s.errorRoot = root
		dir := root
		if cred := s.login.Account.Credential(); cred != nil {
			// Others may pass through to their own directory.
			dir = filepath.Join(root, "ranks")
			if os.Chmod(root, 0o711) != nil || os.Mkdir(dir, 0o700) != nil || os.Chown(dir, int(cred.Uid), int(cred.Gid)) != nil {
				return ""
			}
		}
		s.errorDir = dir
	}
	path := filepath.Join(s.errorDir, "rank."+strconv.Itoa(r.Rank)+".json")
	if s.errorFiles == nil {
		s.errorFiles = map[int]string{}
	}
	s.errorFiles[r.Rank] = path
	return path
}

// errorFileBase is where jobs' error-file directories are made: $TMPDIR
// when set, else /dev/shm when it is a tmpfs (a directory made and removed
// there per job costs microseconds; on an ext4 /tmp, half a millisecond
// of CPU in its inode allocator, a tenth of the agent's work per launch),
// else the system's temporary directory.
var errorFileBase = sync.OnceValue(func() string {
	if os.Getenv("TMPDIR") == "" && onTmpfs("/dev/shm") {
		return "/dev/shm"
	}
	return os.TempDir()
})

// readErrorFile returns what the rank's @record wrote, bounded; "" when
// it wrote nothing. The file must be a regular file, not a link, and
// belong to the rank's user: the agent may be root, and a rank must not
// get another user's file sent to its launcher.
func (s *session) readErrorFile(rank int) string {
	s.errMu.Lock()
	path := s.errorFiles[rank]
	s.errMu.Unlock()
	if path == "" {
		return ""
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != s.rankUid() {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(f, MaxErrorFile))
	return string(b)
}

// rankUid is the uid the session's ranks run as.
func (s *session) rankUid() int {
	if c := s.login.Account.Credential(); c != nil {
		return int(c.Uid)
	}
	return os.Geteuid()
}

// removeErrorFiles removes the job's error files once every rank's Exit
// has been sent, and again (a no-op then) when the session ends.
func (s *session) removeErrorFiles() {
	s.errMu.Lock()
	root := s.errorRoot
	s.errMu.Unlock()
	if root != "" && root != os.DevNull {
		_ = os.RemoveAll(root)
	}
}
