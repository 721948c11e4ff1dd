package rankenv

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/launcher/cli"
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
// once per host, so a big one fits however many ranks a host runs; in
// the compact form the host's own variables and the command do too.
func TestCheckStart(t *testing.T) {
	hosts := []string{"a", "b"}
	starts := func(perHost int, compact bool, hostEnv []string, extra ...string) []HostStart {
		out := make([]HostStart, len(hosts))
		for h := range out {
			out[h].Compact = compact
			if compact {
				out[h].HostEnv = hostEnv
			}
			for l := range perHost {
				env := append([]string{"RANK=" + strconv.Itoa(h*perHost+l), "WORLD_SIZE=" + strconv.Itoa(2*perHost)}, extra...)
				if !compact {
					env = append(env, hostEnv...)
				}
				out[h].Ranks = append(out[h].Ranks, wire.RankSpec{Rank: h*perHost + l, LocalRank: l, Env: env})
			}
		}
		return out
	}
	big := append(manyVars(2000), "BIG="+strings.Repeat("x", MaxVarLen-4))
	for _, perHost := range []int{8, 256} {
		if err := checkStart([]string{"python3", "train.py"}, hosts, big, starts(perHost, false, nil)); err != nil {
			t.Errorf("%d ranks a host sharing 2000 variables and one at 128 KiB: %v", perHost, err)
		}
	}
	huge := strings.Repeat("<", MaxVarLen/6) // 6 bytes each in JSON
	var many []string
	for i := range 16 {
		many = append(many, "H"+strconv.Itoa(i)+"="+huge)
	}
	err := checkStart([]string{"prog"}, hosts, big, starts(8, false, nil, many...))
	if err == nil || !strings.HasPrefix(err.Error(), "host a: the job's start message would be ") ||
		!strings.Contains(err.Error(), "over the protocol's 16.0 MiB limit: 261.7 KiB of environment every rank shares (the launcher's, -x, the job's), and 8 ranks with ") ||
		!strings.Contains(err.Error(), "the largest variables: H10 (8 × 128.0 KiB), H11") {
		t.Errorf("got %v", err)
	}
	// The same host variables, 2 MiB in all: once per rank they are over
	// the limit at eight ranks, once per host (compact) they are not.
	if err := checkStart([]string{"prog"}, hosts, nil, starts(8, false, many)); err == nil || !strings.Contains(err.Error(), "H10 (8 × 128.0 KiB)") {
		t.Errorf("whole form, 2 MiB of host variables per rank: got %v, want refused", err)
	}
	if err := checkStart([]string{"prog"}, hosts, nil, starts(8, true, many)); err != nil {
		t.Errorf("compact form, 2 MiB of host variables once: %v", err)
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
