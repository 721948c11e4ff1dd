//go:build linux

package hostnet

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"golang.org/x/sys/unix"
)

// TestDropCaches: --drop-caches really empties the page cache, and a host
// whose agent does not allow it fails the job unless
// --drop-caches-best-effort.
//
// The namespaces share the kernel, so the page cache is the machine's:
// the test measures it from the root namespace, precisely with mincore(2)
// on a mapping of its own 256 MiB file (resident pages of that file), and
// coarsely with /proc/meminfo's Cached (everything, other processes
// included, so only with wide margins).
//
// It is not parallel: dropping the machine's caches would make the torch
// imports of the parallel tests cold again. Go runs it before them.
func TestDropCaches(t *testing.T) {
	c := newCluster(t, "gwh3", 173, 2)
	c.startAgents(t)
	// A second agent on host 1 that refuses to drop caches.
	refusing := agentPort + 1
	c.startAgent(t, 1, refusing, "--allow-drop-caches=false")
	h0, h1 := c.hosts[0], c.hosts[1]

	t.Run("Shrinks", func(t *testing.T) {
		const size = 256 << 20
		file := filepath.Join(t.TempDir(), "cache.bin")
		writeUncached(t, file, size)
		if r := resident(t, file); r > size/10 {
			t.Fatalf("%d MiB of the fresh file still cached after fsync and FADV_DONTNEED", r>>20)
		}
		cached0 := meminfoCached(t)
		// Read it on host 0 (any namespace: one kernel, one page cache).
		cat := c.bed.Command(t.Context(), 0, "sh", "-c", `cat "$0" > /dev/null`, file)
		if out, err := cat.CombinedOutput(); err != nil {
			t.Fatalf("cat on %s: %v: %s", h0.NS, err, out)
		}
		res1, cached1 := resident(t, file), meminfoCached(t)
		t.Logf("after reading the file on %s: %d of %d MiB resident (mincore); meminfo Cached %d -> %d MiB (%+d)",
			h0.NS, res1>>20, size>>20, cached0>>20, cached1>>20, (cached1-cached0)>>20)
		if res1 < size*9/10 {
			t.Fatalf("only %d of %d MiB resident after reading the file", res1>>20, size>>20)
		}
		if cached1-cached0 < size/2 {
			t.Errorf("meminfo Cached grew by %d MiB reading a %d MiB file, want at least half", (cached1-cached0)>>20, size>>20)
		}

		marks := t.TempDir()
		l := runLauncher(t, append(append(c.conn(c.hostList(1)), "-np", "2", "--drop-caches"), rankScript(marks, "true")...)...)
		res2, cached2 := resident(t, file), meminfoCached(t)
		if l.code != 0 || ranks(t, marks) != 2 {
			t.Fatalf("--drop-caches job: %d of 2 ranks ran; launcher: %v", ranks(t, marks), l)
		}
		for _, h := range c.hosts {
			line := e2e.LineWith(l.stderr.String(), "dropped page caches on "+h.Addr+" in ")
			if line == "" {
				t.Errorf("stderr does not report the drop time of %s:\n%s", h.Addr, l.stderr.String())
			}
			t.Logf("%s", line)
		}
		t.Logf("after --drop-caches (launcher ran %v): %d MiB of the file resident (was %d); meminfo Cached %d -> %d MiB (%+d)",
			l.took.Round(1e6), res2>>20, res1>>20, cached1>>20, cached2>>20, (cached2-cached1)>>20)
		if res2 > size/10 {
			t.Errorf("%d of %d MiB of the file still resident after --drop-caches", res2>>20, size>>20)
		}
		if cached1-cached2 < 200<<20 {
			t.Errorf("meminfo Cached fell by only %d MiB after --drop-caches, want at least 200 MiB (the file alone is %d)", (cached1-cached2)>>20, size>>20)
		}
	})

	refusingHosts := fmt.Sprintf("%s:1,%s:1:%d", h0.Addr, h1.Addr, refusing)
	refusal := "host " + h1.Addr + ": this agent does not allow dropping caches"

	t.Run("Refused", func(t *testing.T) {
		marks := t.TempDir()
		l := runLauncher(t, append(append(c.conn(refusingHosts), "-np", "2", "--drop-caches"), rankScript(marks, "true")...)...)
		t.Logf("--drop-caches with host 1's agent started --allow-drop-caches=false: %v", l)
		if l.code != 1 {
			t.Errorf("exit code %d, want 1", l.code)
		}
		for _, want := range []string{refusal, "--drop-caches-best-effort", "nothing was started"} {
			if !strings.Contains(l.stderr.String(), want) {
				t.Errorf("stderr lacks %q", want)
			}
		}
		noneRan(t, marks)
	})

	t.Run("BestEffort", func(t *testing.T) {
		marks := t.TempDir()
		l := runLauncher(t, append(append(c.conn(refusingHosts), "-np", "2", "--drop-caches", "--drop-caches-best-effort"), rankScript(marks, "true")...)...)
		t.Logf("--drop-caches --drop-caches-best-effort: %v", l)
		if l.code != 0 || ranks(t, marks) != 2 {
			t.Errorf("%d of 2 ranks ran, exit code %d; want both and 0", ranks(t, marks), l.code)
		}
		if want := "drop caches on " + h1.Addr + " failed (best effort)"; !strings.Contains(l.stderr.String(), want) {
			t.Errorf("stderr lacks %q", want)
		}
	})
}

// writeUncached writes size bytes to path, syncs them and asks the kernel
// to evict them, so the file starts out (mostly) not in the page cache.
func writeUncached(t *testing.T, path string, size int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte("gangway hostnet page-cache test\n"), (1<<20)/32)
	for n := 0; n < size; n += len(chunk) {
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

// resident returns how many bytes of path are in the page cache, by
// mincore(2) on a shared read-only mapping. The mapping is made and
// removed here and never touched, so it faults nothing in and does not
// pin pages while caches are dropped.
func resident(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	size := int(fi.Size())
	if size == 0 {
		return 0
	}
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	page := os.Getpagesize()
	vec := make([]byte, (size+page-1)/page)
	// x/sys/unix has no Mincore wrapper.
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		t.Fatalf("mincore %s: %v", path, errno)
	}
	n := 0
	for _, v := range vec {
		if v&1 != 0 {
			n++
		}
	}
	return n * page
}

// meminfoCached returns /proc/meminfo's Cached in bytes.
func meminfoCached(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Cached:")
		if !ok {
			continue
		}
		kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
		if err != nil {
			t.Fatalf("/proc/meminfo: %q: %v", sc.Text(), err)
		}
		return kb << 10
	}
	t.Fatalf("/proc/meminfo has no Cached line (%v)", sc.Err())
	return 0
}
