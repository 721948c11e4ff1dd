package proc

import (
	"errors"
	"testing"
)

// Mount tables as the kernel writes them on the layouts gangway meets.
const (
	// Hybrid (this testbed): v1 controllers, cgroup2 without controllers at
	// /sys/fs/cgroup/unified.
	mountsHybrid = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	// Unified (systemd hosts): cgroup2 at /sys/fs/cgroup, with optional
	// fields before the separator.
	mountsUnified = `25 21 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`
	// A container: its own group bind-mounted, read-only.
	mountsContainer = `700 690 0:23 /kubepods/pod1/c1 /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup ro
`
	// No cgroup2 at all (v1 only), and a mount point with a space.
	mountsV1 = `35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
`
	mountsSpace = `41 31 0:38 / /mnt/cg\0402 rw,relatime - cgroup2 none rw
`
)

func TestParseCgroup2Mounts(t *testing.T) {
	for _, tc := range []struct {
		name, mi string
		want     []cgroupMount
	}{
		{"hybrid", mountsHybrid, []cgroupMount{{root: "/", dir: "/sys/fs/cgroup/unified"}}},
		{"unified", mountsUnified, []cgroupMount{{root: "/", dir: "/sys/fs/cgroup"}}},
		{"container", mountsContainer, []cgroupMount{{root: "/kubepods/pod1/c1", dir: "/sys/fs/cgroup", readOnly: true}}},
		{"v1 only", mountsV1, nil},
		{"escaped", mountsSpace, []cgroupMount{{root: "/", dir: "/mnt/cg 2"}}},
	} {
		got := parseCgroup2Mounts(tc.mi)
		if len(got) != len(tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: got %+v, want %+v", tc.name, got[i], tc.want[i])
			}
		}
	}
}

func TestCgroupDir(t *testing.T) {
	for _, tc := range []struct {
		name, mi, procCgroup string
		want                 string
		readOnly             bool
		err                  error
	}{
		{"hybrid, root group", mountsHybrid, "4:memory:/process_api/x\n0::/\n", "/sys/fs/cgroup/unified", false, nil},
		{"unified, a service", mountsUnified, "0::/system.slice/gangway.service\n", "/sys/fs/cgroup/system.slice/gangway.service", false, nil},
		{"container, its own group", mountsContainer, "0::/kubepods/pod1/c1\n", "/sys/fs/cgroup", true, nil},
		{"container, below its group", mountsContainer, "0::/kubepods/pod1/c1/agent\n", "/sys/fs/cgroup/agent", true, nil},
		{"container, elsewhere", mountsContainer, "0::/kubepods/pod2\n", "", false, ErrNoCgroup2},
		{"cgroup namespace, outside its root", mountsUnified, "0::/../../other\n", "", false, ErrNoCgroup2},
		{"v1 only", mountsV1, "4:memory:/x\n", "", false, ErrNoCgroup2},
		{"no cgroup2 mount", mountsV1, "0::/\n", "", false, ErrNoCgroup2},
	} {
		group, err := parseCgroup2Path(tc.procCgroup)
		var m cgroupMount
		var dir string
		if err == nil {
			m, dir, err = cgroupDir(parseCgroup2Mounts(tc.mi), group)
		}
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("%s: err %v, want %v", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || dir != tc.want || m.readOnly != tc.readOnly {
			t.Errorf("%s: dir %q read-only %v err %v, want %q read-only %v", tc.name, dir, m.readOnly, err, tc.want, tc.readOnly)
		}
	}
}

func TestJobCgroupName(t *testing.T) {
	for _, tc := range []struct {
		job, want string
	}{
		{"3f2a9c", "gangway-12-7-3f2a9c"},
		{"", "gangway-12-7"},
		{"a/b c..d", "gangway-12-7-a_b_c..d"},
		{"0123456789012345678901234567890123456789", "gangway-12-7-01234567890123456789012345678901"},
	} {
		if got := jobCgroupName(12, 7, tc.job); got != tc.want {
			t.Errorf("jobCgroupName(%q) = %q, want %q", tc.job, got, tc.want)
		}
	}
}

// TestCgroupAgent: the agent a job group is named for, back from the
// name; a name that is not a job group's has none.
func TestCgroupAgent(t *testing.T) {
	for name, want := range map[string]int{
		jobCgroupName(12, 7, "3f2a9c"): 12,
		jobCgroupName(4194303, 1, ""):  4194303,
		"gangway-probe-12-1":           0,
		"gangway-":                     0,
		"gangway--1-x":                 0,
		"gangway-0-1":                  0,
		"other-12-1":                   0,
	} {
		got, ok := cgroupAgent(name)
		if ok != (want > 0) || got != want && want > 0 {
			t.Errorf("cgroupAgent(%q) = %d, %v; want %d", name, got, ok, want)
		}
	}
}

func TestPopulated(t *testing.T) {
	for in, want := range map[string]int{"populated 1\nfrozen 0\n": 1, "populated 0\nfrozen 0\n": 0, "frozen 0\n": -1} {
		if got := populated([]byte(in)); got != want {
			t.Errorf("populated(%q) = %d, want %d", in, got, want)
		}
	}
}
