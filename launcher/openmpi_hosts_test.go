package launcher

import (
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/rankenv"
)

func TestSharedMemoryOff(t *testing.T) {
	for _, tc := range []struct {
		btl  string
		want bool
	}{
		{"", false},
		{"tcp,self", true},
		{"self,tcp,openib", true},
		{"self,vader,tcp", false},
		{"self,sm,tcp", false},
		{"^vader", true},
		{"^sm", true},
		{"^vader,sm", true},
		{"^openib", false},
		{"^tcp", false},
	} {
		if got := sharedMemoryOff(tc.btl); got != tc.want {
			t.Errorf("sharedMemoryOff(%q) = %v, want %v", tc.btl, got, tc.want)
		}
	}
}

func TestBTLSetting(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "OMPI_MCA_btl" {
				return v
			}
			return ""
		}
	}
	parse := func(args ...string) cli.Config {
		t.Helper()
		cfg, err := cli.Parse(append(append([]string{"--mpi=openmpi", "-H", "a,b"}, args...), "./prog"), func(string) string { return "" }, []string{"OMPI_MCA_btl=^sm"})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	for _, tc := range []struct {
		name string
		cfg  cli.Config
		env  string
		want string
	}{
		{"none", parse(), "", ""},
		{"launcher's environment", parse(), "^vader", "^vader"},
		{"-x wins over the environment", parse("-x", "OMPI_MCA_btl=tcp,self"), "^vader", "tcp,self"},
		{"-x NAME forwards the launcher's", parse("-x", "OMPI_MCA_btl"), "", "^sm"},
		{"-mca wins, the last one", parse("-x", "OMPI_MCA_btl=vader,self", "-mca", "btl", "sm,self", "-mca", "btl", "tcp,self"), "", "tcp,self"},
	} {
		if got := btlSetting(tc.cfg, env(tc.env)); got != tc.want {
			t.Errorf("%s: btl %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestSameHostnames(t *testing.T) {
	host := func(name, hostname string) rankenv.Host {
		return rankenv.Host{Host: hostfile.Host{Name: name}, Facts: wire.Facts{Hostname: hostname}}
	}
	got := sameHostnames([]rankenv.Host{host("10.0.0.1", "node"), host("10.0.0.2", "gpu1"), host("10.0.0.3", "node"),
		host("10.0.0.4", "gpu2"), host("10.0.0.5", ""), host("10.0.0.6", "")})
	if len(got) != 1 || !strings.HasPrefix(got[0], `hosts 10.0.0.1, 10.0.0.3 report the same hostname "node": `) ||
		!strings.Contains(got[0], "-mca btl ^vader,sm") || !strings.Contains(got[0], "distinct hostnames") {
		t.Errorf("warnings %q", got)
	}
	if got := sameHostnames([]rankenv.Host{host("a", "a"), host("b", "b")}); got != nil {
		t.Errorf("distinct hostnames: %q", got)
	}
}
