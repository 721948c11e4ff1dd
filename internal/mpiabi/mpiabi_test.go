package mpiabi

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/internal/mpiabi/mpiabitest"
)

var helloC = mpiabitest.HelloC

// compile is mpiabitest.Compile.
func compile(t *testing.T, cc, dir, name, src string, args ...string) string {
	t.Helper()
	return mpiabitest.Compile(t, cc, dir, name, src, args...)
}

// TestDetectReal: hello programs built with Debian's Open MPI and MPICH
// compiler wrappers, against the libraries installed here.
func TestDetectReal(t *testing.T) {
	for _, tc := range []struct {
		cc, lib, sym string
		fam          Family
	}{
		{"mpicc.openmpi", "libmpi.so.40", "ompi_mpi_init", OpenMPI},
		{"mpicc.mpich", "libmpich.so.12", "MPIR_Err_create_code", MPICH},
	} {
		t.Run(tc.cc, func(t *testing.T) {
			prog := compile(t, tc.cc, t.TempDir(), "hello", helloC)
			got, err := Detect(prog, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Family != tc.fam || got.Library != tc.lib || got.Symbol != tc.sym || filepath.Base(got.Path) != tc.lib {
				t.Errorf("got %+v, want %s through %s defining %s", got, tc.fam, tc.lib, tc.sym)
			}
			t.Log(got)
		})
	}
	t.Run("not MPI", func(t *testing.T) {
		for _, p := range []string{"/bin/true", "/usr/bin/env"} {
			got, err := Detect(p, Options{})
			if err != nil || got.Family != Unknown {
				t.Errorf("%s: %+v, %v", p, got, err)
			}
		}
	})
	t.Run("library as its own program", func(t *testing.T) {
		// What a statically linked Open MPI program looks like: it
		// defines ompi_mpi_init itself.
		lib := "/usr/lib/x86_64-linux-gnu/libmpi.so.40"
		if _, err := os.Stat(lib); err != nil {
			t.Skip(err)
		}
		got, err := Detect(lib, Options{})
		if err != nil || got.Family != OpenMPI || got.Library != "" || got.Symbol != "ompi_mpi_init" {
			t.Errorf("%+v, %v", got, err)
		}
	})
}

// TestDetectLoaderPaths builds small libraries that carry each family's
// marker under MPI sonames in a private directory, and programs that
// reach them through DT_RUNPATH with $ORIGIN, LD_LIBRARY_PATH, or
// another MPI library (as Open MPI's Fortran bindings need libmpi).
func TestDetectLoaderPaths(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "lib")
	if err := os.Mkdir(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	shared := func(soname, src string, args ...string) {
		t.Helper()
		out := compile(t, "cc", lib, strings.TrimSuffix(soname, filepath.Ext(soname)), src,
			append([]string{"-shared", "-fPIC", "-Wl,-soname," + soname}, args...)...)
		if err := os.Rename(out, filepath.Join(lib, soname)); err != nil {
			t.Fatal(err)
		}
	}
	shared("libmpi.so.40", "int ompi_mpi_init(void) { return 0; }\n")
	shared("libmpi.so.12", "int MPIR_Err_create_code(void) { return 0; }\n")
	shared("libmpi_mpifh.so.40", "int mpi_init_(void) { return 0; }\n", "-L"+lib, "-Wl,--no-as-needed", "-l:libmpi.so.40", "-Wl,-rpath,$ORIGIN")
	const prog = "int main(void) { return 0; }\n"
	link := func(name string, args ...string) string {
		return compile(t, "cc", dir, name, prog, append([]string{"-L" + lib, "-Wl,--no-as-needed"}, args...)...)
	}
	runpath := link("runpath", "-l:libmpi.so.40", "-Wl,-rpath,$ORIGIN/lib")
	plain := link("plain", "-l:libmpi.so.12")
	fortran := link("fortran", "-l:libmpi_mpifh.so.40", "-Wl,-rpath,$ORIGIN/lib")
	script := filepath.Join(dir, "train.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec ./runpath\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, prog string
		o          Options
		want       Finding
	}{
		// DT_RUNPATH comes before the system's own libmpi.so.40.
		{"runpath $ORIGIN", runpath, Options{},
			Finding{Family: OpenMPI, Library: "libmpi.so.40", Path: filepath.Join(lib, "libmpi.so.40"), Symbol: "ompi_mpi_init"}},
		{"LD_LIBRARY_PATH", plain, Options{LibraryPath: "/nonexistent::" + lib},
			Finding{Family: MPICH, Library: "libmpi.so.12", Path: filepath.Join(lib, "libmpi.so.12"), Symbol: "MPIR_Err_create_code"}},
		{"not found: by soname", plain, Options{},
			Finding{Family: MPICH, Library: "libmpi.so.12"}},
		{"through another MPI library", fortran, Options{},
			Finding{Family: OpenMPI, Library: "libmpi.so.40", Path: filepath.Join(lib, "libmpi.so.40"), Symbol: "ompi_mpi_init"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Detect(tc.prog, tc.o)
			tc.want.Program = tc.prog
			if err != nil || got != tc.want {
				t.Errorf("got %+v, %v\nwant %+v", got, err, tc.want)
			}
			t.Log(got)
		})
	}
	if _, err := Detect(script, Options{}); !errors.Is(err, ErrNotELF) {
		t.Errorf("a #! script: err = %v, want ErrNotELF", err)
	}
	if _, err := Detect("/dev/null", Options{}); !errors.Is(err, ErrNotELF) {
		t.Errorf("a device: err = %v, want ErrNotELF", err)
	}
	if _, err := Detect(filepath.Join(dir, "missing"), Options{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing program: err = %v", err)
	}
}

func TestLdSoConfDirs(t *testing.T) {
	dir := t.TempDir()
	d := filepath.Join(dir, "ld.so.conf.d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(path, s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	main := filepath.Join(dir, "ld.so.conf")
	write(main, "/first\ninclude ld.so.conf.d/*.conf\n# comment\n/last/ # trailing\nhwcap 0 nosegneg\nrelative/dir\n")
	write(filepath.Join(d, "a.conf"), "# libc default configuration\n/usr/local/lib\n/opt/a:/opt/b,/opt/c\n")
	write(filepath.Join(d, "b.conf"), "/usr/lib/x86_64-linux-gnu\ninclude "+main+"\n") // a loop, bounded
	got := LdSoConfDirs(main)
	want := []string{"/first", "/usr/local/lib", "/opt/a", "/opt/b", "/opt/c", "/usr/lib/x86_64-linux-gnu", "/first"}
	if len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		t.Errorf("dirs %q, want them to start %q", got, want)
	}
	if len(got) > 10*maxIncludes {
		t.Errorf("%d dirs: the include loop was not bounded", len(got))
	}
	if got := LdSoConfDirs(filepath.Join(dir, "missing")); got != nil {
		t.Errorf("missing file: %q", got)
	}
}
