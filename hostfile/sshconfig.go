package hostfile

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// SSHConfigPort reads the port an OpenSSH client or server configuration
// (ssh_config, sshd_config) sets for every host: the first Port keyword
// before any Host or Match block, or inside a "Host *" block. Keywords
// are case-insensitive, "Port 2222" and "Port=2222" both count, '#'
// starts a comment. ok is false when no such Port is set or its value is
// not a port number (1..65535).
//
// mpi-operator's images configure their ssh and sshd this way (Port 2222
// in /etc/ssh/ssh_config and sshd_config); the agent and the launcher read
// it only inside such a job.
func SSHConfigPort(r io.Reader) (port int, ok bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	global := true
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		key, val := splitKeyword(line)
		switch strings.ToLower(key) {
		case "host":
			patterns := strings.Fields(val)
			global = len(patterns) == 1 && patterns[0] == "*"
		case "match":
			global = false
		case "port":
			if !global {
				continue
			}
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 || n > 65535 {
				return 0, false
			}
			return n, true
		}
	}
	return 0, false
}

// splitKeyword splits "Keyword value" or "Keyword=value" (OpenSSH allows
// either, with spaces around the '=').
func splitKeyword(line string) (key, val string) {
	i := strings.IndexAny(line, " \t=")
	if i < 0 {
		return line, ""
	}
	val = strings.TrimSpace(line[i:])
	return line[:i], strings.TrimSpace(strings.TrimPrefix(val, "="))
}
