package transport

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadKeyPermissions: a private key file of ours that group or
// others may read is refused, as OpenSSH's ssh refuses it; 0600 and 0400
// load.
func TestLoadKeyPermissions(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).CombinedOutput(); err != nil {
		t.Skipf("ssh-keygen: %v %s", err, out)
	}
	for _, tt := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o600, true}, {0o400, true}, {0o640, false}, {0o644, false}, {0o604, false}} {
		if err := os.Chmod(key, tt.mode); err != nil {
			t.Fatal(err)
		}
		_, err := loadKey(key)
		if tt.ok && err != nil || !tt.ok && (err == nil || !strings.Contains(err.Error(), "too open") || !strings.Contains(err.Error(), "chmod 600")) {
			t.Errorf("mode %04o: %v, want ok %v", tt.mode, err, tt.ok)
		}
	}
	if _, err := loadKey(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory as a key: %v", err)
	}
}
