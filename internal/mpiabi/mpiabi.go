// Package mpiabi tells which MPI library an ELF program is linked
// against: Open MPI, whose ranks cannot use a PMI-1/PMI-2 server and run
// as singletons under one, or the MPICH family (MPICH, Intel MPI,
// MVAPICH), which speaks PMI. It reads the program's DT_NEEDED entries
// with debug/elf, resolves the MPI-looking ones as the dynamic loader
// would (DT_RPATH, LD_LIBRARY_PATH, DT_RUNPATH with $ORIGIN, the
// ld.so.conf directories, the default directories) and looks for each
// implementation's own symbols in the library's dynamic symbol table, or
// in the program's symbols when it is linked statically. Scripts and
// other non-ELF files are not inspected (ErrNotELF).
//
// mpiabi imports no gangway package.
package mpiabi

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Family is an MPI implementation family.
type Family int

// Families.
const (
	Unknown Family = iota // no MPI library recognised
	OpenMPI               // Open MPI (libmpi.so.40 for 3.0 to 5.x)
	MPICH                 // MPICH and its derivatives (libmpich.so.12, libmpi.so.12)
)

func (f Family) String() string {
	return [...]string{"no MPI", "Open MPI", "MPICH"}[f]
}

// markers are symbols that only one family's library defines:
// ompi_mpi_init is Open MPI's MPI_Init (3.0 to 5.x); MPIR_Err_create_code
// is MPICH's error machinery (also Intel MPI and MVAPICH), and
// MPII_Version_string MPICH 3.3 and later. Open MPI 4 also defines MPIR_
// symbols (the debugger interface), so no MPIR_ prefix alone decides.
var markers = map[string]Family{
	"ompi_mpi_init":        OpenMPI,
	"MPIR_Err_create_code": MPICH,
	"MPII_Version_string":  MPICH,
}

// sonames decide when a library cannot be read on this host: Open MPI
// has used soname 40 since 3.0; MPICH's ABI is 12 (libmpi.so.12 where
// MPICH is installed as libmpi, libmpich.so.12 on Debian).
var sonames = map[string]Family{
	"libmpi.so.40":   OpenMPI,
	"libmpi.so.12":   MPICH,
	"libmpich.so.12": MPICH,
}

// ErrNotELF marks a program that is not an ELF file (a #! script, a
// Python file): it is not inspected.
var ErrNotELF = errors.New("not an ELF program")

// Finding is what Detect found.
type Finding struct {
	Family  Family
	Program string // the file inspected
	// Library is the DT_NEEDED name that decided ("libmpi.so.40"), empty
	// when the program's own symbols did (static linking) or nothing did.
	Library string
	// Path is where Library was found on this host, empty when it was
	// not found (Family then comes from its name alone).
	Path string
	// Symbol is the marker symbol found, empty when the name decided.
	Symbol string
}

// String says what was found and how, for logs and messages.
func (f Finding) String() string {
	switch {
	case f.Family == Unknown:
		return f.Program + ": no MPI library recognised"
	case f.Library == "":
		return fmt.Sprintf("%s: %s, linked in (defines %s)", f.Program, f.Family, f.Symbol)
	case f.Path == "":
		return fmt.Sprintf("%s: %s (needs %s, not found on this host: by its name)", f.Program, f.Family, f.Library)
	}
	return fmt.Sprintf("%s: %s (needs %s: %s defines %s)", f.Program, f.Family, f.Library, f.Path, f.Symbol)
}

// Options are the loader's inputs; the zero value is the host's.
type Options struct {
	// LibraryPath is LD_LIBRARY_PATH as the ranks will have it.
	LibraryPath string
	// LdSoConf is the loader's configuration file; "" is /etc/ld.so.conf.
	LdSoConf string
}

// maxDepth bounds how far Detect follows MPI libraries' own DT_NEEDED
// (Open MPI's Fortran and C++ bindings need libmpi.so.40 in turn).
const maxDepth = 4

// Detect inspects the ELF program at path (already looked up in PATH).
func Detect(path string, o Options) (Finding, error) {
	fd := Finding{Program: path}
	f, err := openELF(path)
	if err != nil {
		return fd, err
	}
	defer f.Close()
	l := newLoader(o, f.File)
	return l.inspect(fd, f, filepath.Dir(path))
}

// openELF opens an ELF file; anything else is ErrNotELF. Only regular
// files are opened: a FIFO or device named by a program's DT_NEEDED
// could block the open or the read for ever.
func openELF(path string) (*elfFile, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w (not a regular file)", path, ErrNotELF)
	}
	r, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	var magic [4]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil || string(magic[:]) != elf.ELFMAG {
		r.Close()
		return nil, fmt.Errorf("%s: %w", path, ErrNotELF)
	}
	f, err := elf.NewFile(r)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &elfFile{File: f, closer: r}, nil
}

// elfFile closes the file under an elf.File made by elf.NewFile.
type elfFile struct {
	*elf.File
	closer io.Closer
}

func (f *elfFile) Close() error { return f.closer.Close() }

// inspect decides from an open program: its MPI-looking DT_NEEDED entries
// first (and theirs, to maxDepth), then its own symbols.
func (l *loader) inspect(fd Finding, f *elfFile, dir string) (Finding, error) {
	needed, err := f.ImportedLibraries()
	if err != nil {
		return fd, fmt.Errorf("%s: dynamic section: %w", fd.Program, err)
	}
	if lib, path, sym, fam := l.search(f.File, dir, needed, 0, map[string]bool{}); fam != Unknown {
		fd.Family, fd.Library, fd.Path, fd.Symbol = fam, lib, path, sym
		return fd, nil
	}
	if sym, fam := definedMarker(f.File, len(needed) == 0); fam != Unknown {
		fd.Family, fd.Symbol = fam, sym
	}
	return fd, nil
}

// search looks through the MPI-looking names of needed (the DT_NEEDED
// of from, a file in dir), depth levels below the program, and returns
// the first that decides.
func (l *loader) search(from *elf.File, dir string, needed []string, depth int, seen map[string]bool) (lib, path, sym string, fam Family) {
	if depth >= maxDepth {
		return "", "", "", Unknown
	}
	for _, name := range needed {
		if !mpiLooking(name) || seen[name] {
			continue
		}
		seen[name] = true
		lib, path, sym, fam = l.try(from, dir, name, depth, seen)
		if fam != Unknown {
			return lib, path, sym, fam
		}
	}
	return "", "", "", Unknown
}

// try decides from one needed library: its marker symbols, else those of
// the MPI libraries it needs, else its name.
func (l *loader) try(from *elf.File, dir, name string, depth int, seen map[string]bool) (lib, path, sym string, fam Family) {
	lf, p := l.find(from, dir, name)
	if lf == nil {
		return name, "", "", sonames[name]
	}
	defer lf.Close()
	if s, fam := definedMarker(lf.File, false); fam != Unknown {
		return name, p, s, fam
	}
	if more, err := lf.ImportedLibraries(); err == nil {
		if l2, p2, s2, f2 := l.search(lf.File, filepath.Dir(p), more, depth+1, seen); f2 != Unknown {
			return l2, p2, s2, f2
		}
	}
	return name, p, "", sonames[name]
}

// mpiLooking reports whether a DT_NEEDED name may be an MPI library:
// libmpi*.so (Open MPI's libmpi, libmpi_cxx, libmpi_mpifh..., MPICH's
// libmpi.so.12, Intel's libmpifort) or libmpich*.so.
func mpiLooking(name string) bool {
	return strings.HasPrefix(name, "libmpi") && strings.Contains(name, ".so")
}

// definedMarker returns the first marker symbol f defines (not merely
// imports), from its dynamic symbols and, when static is set, its full
// symbol table.
func definedMarker(f *elf.File, static bool) (string, Family) {
	tables := []func() ([]elf.Symbol, error){f.DynamicSymbols}
	if static {
		tables = append(tables, f.Symbols)
	}
	for _, table := range tables {
		syms, err := table()
		if err != nil {
			continue
		}
		for _, s := range syms {
			if fam, ok := markers[s.Name]; ok && s.Section != elf.SHN_UNDEF {
				return s.Name, fam
			}
		}
	}
	return "", Unknown
}
