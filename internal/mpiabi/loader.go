package mpiabi

import (
	"bufio"
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
)

// loader finds libraries as glibc's ld.so does, for one program: its
// class and machine (a library of another is skipped, as ld.so skips
// it), LD_LIBRARY_PATH, and the ld.so.conf directories read once.
type loader struct {
	o       Options
	class   elf.Class
	machine elf.Machine
	conf    []string
	confOK  bool
}

func newLoader(o Options, prog *elf.File) *loader {
	return &loader{o: o, class: prog.Class, machine: prog.Machine}
}

// find returns the library name that from (a file in dir) needs, opened,
// and its path; nil when it is not found. The order is ld.so's:
// DT_RPATH (when from has no DT_RUNPATH), LD_LIBRARY_PATH, DT_RUNPATH,
// the ld.so.conf directories (ld.so.cache holds what ldconfig found
// there), then the default directories. $ORIGIN is dir.
func (l *loader) find(from *elf.File, dir, name string) (*elfFile, string) {
	if strings.Contains(name, "/") {
		return l.open(name)
	}
	runpath, _ := from.DynString(elf.DT_RUNPATH)
	var dirs []string
	if len(runpath) == 0 {
		rpath, _ := from.DynString(elf.DT_RPATH)
		dirs = append(dirs, expand(rpath, dir)...)
	}
	dirs = append(dirs, splitPath(l.o.LibraryPath)...)
	dirs = append(dirs, expand(runpath, dir)...)
	dirs = append(dirs, l.confDirs()...)
	if l.class == elf.ELFCLASS64 {
		dirs = append(dirs, "/lib64", "/usr/lib64")
	}
	dirs = append(dirs, "/lib", "/usr/lib")
	for _, d := range dirs {
		if f, p := l.open(filepath.Join(d, name)); f != nil {
			return f, p
		}
	}
	return nil, ""
}

// open opens path when it is an ELF file of the program's class and
// machine.
func (l *loader) open(path string) (*elfFile, string) {
	f, err := openELF(path)
	if err != nil {
		return nil, ""
	}
	if f.Class != l.class || f.Machine != l.machine {
		f.Close()
		return nil, ""
	}
	return f, path
}

// expand splits DT_RPATH/DT_RUNPATH values into directories, with
// $ORIGIN (or ${ORIGIN}) replaced by dir. Entries with other tokens
// ($LIB, $PLATFORM) are left as they are and so not found.
func expand(values []string, dir string) []string {
	var out []string
	for _, v := range values {
		for _, d := range splitPath(v) {
			d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", dir), "$ORIGIN", dir)
			out = append(out, d)
		}
	}
	return out
}

// splitPath splits a colon-separated list, dropping empty entries (ld.so
// reads an empty entry as the current directory, which no rank's
// directory is known to be here).
func splitPath(s string) []string {
	var out []string
	for d := range strings.SplitSeq(s, ":") {
		if d != "" {
			out = append(out, d)
		}
	}
	return out
}

func (l *loader) confDirs() []string {
	if !l.confOK {
		path := l.o.LdSoConf
		if path == "" {
			path = "/etc/ld.so.conf"
		}
		l.conf, l.confOK = LdSoConfDirs(path), true
	}
	return l.conf
}

// maxIncludes bounds the files LdSoConfDirs reads (include loops).
const maxIncludes = 256

// LdSoConfDirs returns the directories of an ld.so.conf file, in order,
// following its `include GLOB` lines (relative globs are relative to the
// including file's directory, as ldconfig reads them). Comments and
// `hwcap` lines are skipped; a file that cannot be read adds nothing.
func LdSoConfDirs(path string) []string {
	var dirs []string
	read := 0
	var walk func(path string, depth int)
	walk = func(path string, depth int) {
		if depth > 8 || read >= maxIncludes {
			return
		}
		read++
		b, err := os.ReadFile(path)
		if err != nil {
			return
		}
		add := func(d string) { dirs = append(dirs, d) }
		parseLdSoConf(b, filepath.Dir(path), add, func(glob string) {
			matches, _ := filepath.Glob(glob)
			for _, m := range matches {
				walk(m, depth+1)
			}
		})
	}
	walk(path, 0)
	return dirs
}

// parseLdSoConf reads one ld.so.conf file: add gets each directory and
// include each include line's glob (made absolute against dir), in the
// file's order.
func parseLdSoConf(b []byte, dir string, add, include func(string)) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' || r == ':' || r == ',' })
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "include":
			for _, g := range f[1:] {
				if !filepath.IsAbs(g) {
					g = filepath.Join(dir, g)
				}
				include(g)
			}
		case "hwcap":
		default:
			for _, d := range f {
				if filepath.IsAbs(d) {
					add(filepath.Clean(d))
				}
			}
		}
	}
}
