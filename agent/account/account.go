// Package account is what the agent's SSH server (agent/sshd) and its
// launcher sessions (agent) both speak of: local users that sessions run
// as (Account: ids, groups, home, login shell) and Login, who a launcher
// session serves, as the server established it. It owns the passwd and
// group lookups and nothing else. Of gangway's packages it imports only
// agent/proc (Enter tries a chdir as the user); it must not import agent
// or agent/sshd, which both import it.
package account

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/gangway-hpc/gangway/agent/proc"
)

// Account is a local user that sessions run as: its ids, groups, home and
// login shell, from the passwd and group databases (os/user; a
// CGO_ENABLED=0 build reads /etc/passwd and /etc/group) and the shell
// from /etc/passwd.
type Account struct {
	Name     string
	Uid, Gid uint32
	// Groups are the supplementary group ids, the primary group included.
	Groups []uint32
	Home   string
	Shell  string
}

// ErrUnknownUser is returned for a user name with no local account.
var ErrUnknownUser = errors.New("no such local user")

// passwdFile is where login shells are read from; tests may not change it.
const passwdFile = "/etc/passwd"

// Lookup finds the local account called name.
func Lookup(name string) (*Account, error) {
	if !plausibleUserName(name) {
		return nil, ErrUnknownUser
	}
	u, err := user.Lookup(name)
	if err != nil {
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) {
			return nil, ErrUnknownUser
		}
		return nil, fmt.Errorf("look up user: %w", err)
	}
	a, err := accountOf(u)
	if err != nil {
		return nil, err
	}
	shell, found, err := passwdShell(passwdFile, name)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("user %s has no line in %s, so no login shell", name, passwdFile)
	}
	a.Shell = shell
	return a, nil
}

// accountOf turns an os/user entry into an Account (without its shell).
func accountOf(u *user.User) (*Account, error) {
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: uid %q: %w", u.Username, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: gid %q: %w", u.Username, u.Gid, err)
	}
	a := &Account{Name: u.Username, Uid: uint32(uid), Gid: uint32(gid), Home: u.HomeDir, Groups: []uint32{uint32(gid)}}
	if ids, err := u.GroupIds(); err == nil {
		for _, s := range ids {
			g, err := strconv.ParseUint(s, 10, 32)
			if err == nil && uint32(g) != a.Gid {
				a.Groups = append(a.Groups, uint32(g))
			}
		}
	}
	if a.Home == "" {
		a.Home = "/"
	}
	return a, nil
}

// plausibleUserName refuses names no passwd entry can have, before any
// lookup: empty, over 64 bytes, or with a separator or control byte.
func plausibleUserName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c == ':' || c == '/' || c == 0x7f {
			return false
		}
	}
	return true
}

// passwdShell reads name's login shell from a passwd file; an empty field
// means /bin/sh, as for sshd.
func passwdShell(path, name string) (shell string, found bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", false, fmt.Errorf("read login shells: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.Split(sc.Text(), ":")
		if len(p) >= 7 && p[0] == name {
			if p[6] == "" {
				return "/bin/sh", true, nil
			}
			return p[6], true, nil
		}
	}
	return "", false, sc.Err()
}

// CheckShell says why shell cannot be a login shell: it must exist, be an
// executable file, and be neither nologin nor false (by name, or by the
// name of what it links to). /etc/shells is not consulted: containers
// often lack it, and sshd does not read it either.
func CheckShell(shell string) error {
	if !filepath.IsAbs(shell) {
		return fmt.Errorf("login shell %q is not an absolute path", shell)
	}
	st, err := os.Stat(shell)
	if err != nil {
		return fmt.Errorf("login shell %s: %w", shell, err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("login shell %s is not an executable file", shell)
	}
	names := []string{filepath.Base(shell)}
	if real, err := filepath.EvalSymlinks(shell); err == nil {
		names = append(names, filepath.Base(real))
	}
	for _, n := range names {
		if n == "nologin" || n == "false" {
			return fmt.Errorf("login shell %s refuses logins", shell)
		}
	}
	return nil
}

// Credential is what a child process needs to run as a: nil when a is
// the agent's own user (no change of ids).
func (a *Account) Credential() *syscall.Credential {
	if a == nil || (int(a.Uid) == os.Geteuid() && int(a.Gid) == os.Getegid()) {
		return nil
	}
	return &syscall.Credential{Uid: a.Uid, Gid: a.Gid, Groups: a.Groups}
}

// Identity is the environment that names a: USER, LOGNAME, HOME, SHELL.
func (a *Account) Identity() []string {
	return []string{"HOME=" + a.Home, "LOGNAME=" + a.Name, "SHELL=" + a.Shell, "USER=" + a.Name}
}

// Self is the account the agent runs as. Without a passwd entry
// (a container started with an arbitrary uid) it is built from the
// process's ids, $USER and $HOME, with /bin/sh as its shell.
func Self() *Account {
	if u, err := user.Current(); err == nil {
		if a, err := Lookup(u.Username); err == nil && int(a.Uid) == os.Geteuid() {
			return a
		}
	}
	a := &Account{Name: os.Getenv("USER"), Uid: uint32(os.Geteuid()), Gid: uint32(os.Getegid()), Shell: "/bin/sh"}
	if u, err := user.Current(); err == nil && u.Username != "" {
		a.Name, a.Home = u.Username, u.HomeDir
	}
	if a.Name == "" {
		a.Name = strconv.Itoa(int(a.Uid))
	}
	if a.Home == "" {
		a.Home, _ = os.UserHomeDir()
	}
	if a.Home == "" {
		a.Home = "/"
	}
	a.Groups = []uint32{a.Gid}
	return a
}

// Enter says why a cannot make dir its working directory, or nil. The
// chdir is tried as a's user (proc.Enterable): ACLs, groups and mounts
// count as they will for a's processes, and a user learns nothing about
// a path they could not learn themselves.
func (a *Account) Enter(dir string) error {
	return proc.Enterable(a.Credential(), dir)
}
