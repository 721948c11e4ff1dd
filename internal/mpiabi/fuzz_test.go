package mpiabi

import (
	"bytes"
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDetect feeds arbitrary ELF images to Detect's inspection (in
// memory; the MPI-looking libraries they name are looked up on this
// host): it must not panic. Seeds: the start of this host's /bin/true
// (headers and program headers; whole programs slow the mutator down),
// and the start of an ELF header.
func FuzzDetect(f *testing.F) {
	if b, err := os.ReadFile("/bin/true"); err == nil && len(b) > 4096 {
		f.Add(b[:4096])
	}
	f.Add([]byte("\x7fELF\x02\x01\x01\x00"))
	f.Add([]byte{})
	none := filepath.Join(f.TempDir(), "none")
	f.Fuzz(func(t *testing.T, b []byte) {
		ef, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			return
		}
		fd := Finding{Program: "fuzz"}
		l := newLoader(Options{LdSoConf: none}, ef)
		got, err := l.inspect(fd, &elfFile{File: ef, closer: io.NopCloser(nil)}, "/nonexistent")
		if err != nil && got.Family != Unknown {
			t.Fatalf("error %v with a family %v", err, got.Family)
		}
	})
}
