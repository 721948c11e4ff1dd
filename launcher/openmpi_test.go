package launcher

import (
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/launcher/cli"
)

func TestOpenMPIArgs(t *testing.T) {
	cfg, err := cli.Parse([]string{"--mpi=openmpi", "-np", "4", "-H", "a:2,b:2", "-i", "/k", "--known-hosts", "/kh", "-F", "/cfg",
		"-x", "FOO=bar", "-mca", "btl", "tcp,self", "--tag-output", "-map-by", "node", "./prog", "-v"}, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	args, err := openMPIArgs(cfg, "/bin/launcher", "/tmp/hf", 4, true)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(args, " ")
	want := "--hostfile /tmp/hf -np 4 --map-by node --bind-to none --mca plm_rsh_agent /bin/launcher --rsh -F /cfg -i /k --known-hosts /kh" +
		" --mca routed_radix 64 --allow-run-as-root --tag-output --mca btl tcp,self -x PYTHONUNBUFFERED=1 -x FOO=bar"
	if got != want {
		t.Fatalf("mpirun args\n got %s\nwant %s", got, want)
	}
	if strings.Contains(got, "./prog") {
		t.Fatal("program must be appended by the caller")
	}
	cfg.Place.Hosts[0].Port, cfg.Place.Hosts[1].Port = 2222, 2223
	if _, err := openMPIArgs(cfg, "/bin/launcher", "/tmp/hf", 4, false); err == nil {
		t.Fatal("different per-host ports accepted; mpirun has one ssh command")
	}
	cfg.Place.Hosts[0].Port, cfg.Place.Hosts[1].Port = 0, 0
	if _, err := openMPIArgs(cfg, "/path with space/launcher", "/tmp/hf", 4, false); err == nil || !strings.Contains(err.Error(), "spaces") {
		t.Fatal("a launcher path with a space accepted; plm_rsh_agent splits on spaces")
	}
}
