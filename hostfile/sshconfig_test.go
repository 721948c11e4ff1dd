package hostfile

import (
	"strings"
	"testing"
)

func TestSSHConfigPort(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		port     int
		ok       bool
	}{
		{"mpi-operator base image", "Port 2222\nPasswordAuthentication no\n", 2222, true},
		{"equals", "port=2022\n", 2022, true},
		{"equals with spaces", "  PORT = 2023 # comment\n", 2023, true},
		{"comment only", "# Port 2222\n", 0, false},
		{"after a Host block", "Host gpu*\n  Port 2222\n", 0, false},
		{"Host *", "Host *\n  StrictHostKeyChecking no\n  Port 2222\n", 2222, true},
		{"Host * after another", "Host a\n Port 1\nHost *\n Port 2\n", 2, true},
		{"Match ends the global part", "Match User x\n Port 2222\n", 0, false},
		{"first wins", "Port 1\nPort 2\n", 1, true},
		{"not a number", "Port ssh\n", 0, false},
		{"out of range", "Port 70000\n", 0, false},
		{"no value", "Port\n", 0, false},
		{"empty", "", 0, false},
	} {
		port, ok := SSHConfigPort(strings.NewReader(tc.in))
		if port != tc.port || ok != tc.ok {
			t.Errorf("%s: %d %v, want %d %v", tc.name, port, ok, tc.port, tc.ok)
		}
	}
}

func FuzzSSHConfigPort(f *testing.F) {
	for _, s := range []string{"Port 2222\n", "Host *\n Port=1\n", "Match all\nPort 3\n", "Host\nPort\n=", "Port = \n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if port, ok := SSHConfigPort(strings.NewReader(s)); ok && (port < 1 || port > 65535) {
			t.Fatalf("port %d accepted", port)
		}
	})
}
