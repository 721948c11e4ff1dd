//go:build !linux

package proc

import (
	"fmt"
	"runtime"
	"syscall"
	"time"
)

// CgroupParent is where job cgroups are made; there is none off Linux.
type CgroupParent struct{ dir string }

// FindCgroupParent always fails off Linux.
func FindCgroupParent() (*CgroupParent, error) {
	return nil, fmt.Errorf("%w on %s", ErrNoCgroup2, runtime.GOOS)
}

// Dir is the parent group's directory.
func (p *CgroupParent) Dir() string { return p.dir }

// New fails off Linux.
func (p *CgroupParent) New(job string) (*Cgroup, error) {
	return nil, fmt.Errorf("%w on %s", ErrNoCgroup2, runtime.GOOS)
}

// Sweep does nothing off Linux.
func (p *CgroupParent) Sweep(timeout time.Duration) ([]string, error) { return nil, nil }

// Cgroup is a job's cgroup; there is none off Linux.
type Cgroup struct{ dir string }

// Path is the group's directory.
func (c *Cgroup) Path() string { return c.dir }

// Close does nothing off Linux.
func (c *Cgroup) Close(timeout time.Duration) error { return nil }

func applyCgroup(attr *syscall.SysProcAttr, c *Cgroup) {}
