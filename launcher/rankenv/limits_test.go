package rankenv

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/nccl"
)

func TestCheckSizes(t *testing.T) {
	big := strings.Repeat("x", MaxVarLen-len("BIG="))
	for _, tt := range []struct {
		name    string
		environ []string
		args    []string
		err     string // "" for none
	}{
		{"2000 variables and a value at the limit", append(manyVars(2000), "BIG="+big), nil, ""},
		{"forwarded, one byte over", []string{"BIG=" + big + "x"}, nil, "environment variable BIG (forwarded) is 128.0 KiB; a process's environment takes at most 128.0 KiB per variable (Linux's MAX_ARG_STRLEN): unset it, or leave it home with -genvnone or -genvlist"},
		{"left home by -genvnone", []string{"BIG=" + big + "x"}, []string{"-genvnone"}, ""},
		{"-genv", nil, []string{"-genv", "G", big + "xxx"}, "environment variable G (-genv) is 128.0 KiB"},
		{"-x NAME of a host-specific one", []string{"TMPDIR=" + big + "xxxxxxx"}, []string{"-x", "TMPDIR"}, "environment variable TMPDIR (-x)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := cli.Parse(append(tt.args, "prog"), func(string) string { return "" }, tt.environ)
			if err != nil {
				t.Fatal(err)
			}
			err = CheckSizes(cfg)
			switch {
			case tt.err == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, cli.ErrUsage)):
				t.Errorf("got %v, want a usage error with %q", err, tt.err)
			}
		})
	}
}

func manyVars(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "V" + strconv.Itoa(i) + "=" + strings.Repeat("v", 60)
	}
	return out
}

// TestCheckStart: a host's start message over wire.MaxJobControl is
// refused before it is sent, naming the host and the largest variables;
// one that fits passes. The launcher's forwarded environment travels
// once per host, so a big one fits however many ranks a host runs.
func TestCheckStart(t *testing.T) {
	hosts := []string{"a", "b"}
	placed := func(perHost int) []plan.Rank {
		var ranks []plan.Rank
		for r := range 2 * perHost {
			ranks = append(ranks, plan.Rank{Rank: r, Host: r / perHost, LocalRank: r % perHost, LocalSize: perHost})
		}
		return ranks
	}
	own := func(n int, extra ...string) [][]string {
		envs := make([][]string, n)
		for i := range envs {
			envs[i] = append([]string{"RANK=" + strconv.Itoa(i), "WORLD_SIZE=" + strconv.Itoa(n)}, extra...)
		}
		return envs
	}
	big := append(manyVars(2000), "BIG="+strings.Repeat("x", MaxVarLen-4))
	for _, perHost := range []int{8, 256} {
		if err := checkStart([]string{"python3", "train.py"}, placed(perHost), hosts, big, own(2*perHost)); err != nil {
			t.Errorf("%d ranks a host sharing 2000 variables and one at 128 KiB: %v", perHost, err)
		}
	}
	huge := strings.Repeat("<", MaxVarLen/6) // 6 bytes each in JSON
	var many []string
	for i := range 16 {
		many = append(many, "H"+strconv.Itoa(i)+"="+huge)
	}
	err := checkStart([]string{"prog"}, placed(8), hosts, big, own(16, many...))
	if err == nil || !strings.HasPrefix(err.Error(), "host a: the job's start message would be ") ||
		!strings.Contains(err.Error(), "over the protocol's 16.0 MiB limit: 261.7 KiB of environment every rank shares (the launcher's, -x, the job's), and 8 ranks with ") ||
		!strings.Contains(err.Error(), "the largest variables: H10 (8 × 128.0 KiB), H11") {
		t.Errorf("got %v", err)
	}
}

func TestReplacedWarnings(t *testing.T) {
	hosts := []Host{{Host: hostfile.Host{Name: "a"}}, {Host: hostfile.Host{Name: "b"}}}
	choices := []*nccl.Choice{{Ifaces: []string{"eth0"}}, {Ifaces: []string{"eth0"}}}
	for _, tc := range []struct {
		environ, args []string
		choices       []*nccl.Choice
		want          []string
	}{
		{[]string{"NCCL_SOCKET_IFNAME=eth9", "NCCL_DEBUG=INFO"}, nil, choices,
			[]string{"NCCL_SOCKET_IFNAME=eth9 from the launcher's environment is replaced by each host's choice (=eth0 on a); -x NCCL_SOCKET_IFNAME keeps yours"}},
		{[]string{"GLOO_SOCKET_IFNAME=eth0"}, nil, choices, nil},                                  // the same value
		{[]string{"NCCL_SOCKET_IFNAME=eth9"}, []string{"-x", "NCCL_SOCKET_IFNAME"}, choices, nil}, // -x keeps it
		{[]string{"NCCL_SOCKET_IFNAME=eth9"}, nil, []*nccl.Choice{nil}, nil},                      // one host: it applies
	} {
		cfg, err := cli.Parse(append(tc.args, "prog"), func(string) string { return "" }, tc.environ)
		if err != nil {
			t.Fatal(err)
		}
		if got := ReplacedWarnings(cfg, hosts, tc.choices); !slices.Equal(got, tc.want) {
			t.Errorf("%q %q: got %q, want %q", tc.environ, tc.args, got, tc.want)
		}
	}
}
