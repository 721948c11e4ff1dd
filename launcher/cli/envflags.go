package cli

import (
	"flag"
	"fmt"
	"strings"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// Where a rank's variable comes from, as --dry-run groups them. The
// user's sources are Config.Env.Sources' values; the others are the
// launcher's (launcher/rankenv).
const (
	SrcEnvFile = "--env-file" // --env-file and DeepSpeed's .deepspeed_env
	SrcX       = "-x"         // Open MPI's -x
	SrcGenv    = "-genv"      // Hydra's -genv and -env
)

// ForwardMode is what of the launcher's own environment every rank gets
// (Hydra's -genvall, -genvnone, -genvlist).
type ForwardMode int

const (
	// ForwardAll (the default, -genvall): the launcher's environment less
	// the host-specific names (rankenv.HostSpecific).
	ForwardAll ForwardMode = iota
	// ForwardNone (-genvnone): nothing; ranks on other hosts start from
	// their agent's environment, with -x, -genv and --env-file on top.
	ForwardNone
	// ForwardList (-genvlist A,B): only the names listed, host-specific
	// or not (the user named them).
	ForwardList
)

func (m ForwardMode) String() string {
	switch m {
	case ForwardNone:
		return "-genvnone"
	case ForwardList:
		return "-genvlist"
	}
	return "-genvall"
}

// envArg is one -x or -genv word, with the flag that gave it.
type envArg struct{ flag, arg string }

// envArgFlag collects -x NAME[=VALUE] and -genv NAME VALUE (which
// splitArgs joins as NAME=VALUE) in command-line order.
type envArgFlag struct {
	v    *[]envArg
	flag string
}

func (f envArgFlag) String() string { return "" }
func (f envArgFlag) Set(s string) error {
	if f.flag == SrcGenv && !strings.Contains(s, "=") {
		return fmt.Errorf("want -genv NAME VALUE, got %q", s)
	}
	*f.v = append(*f.v, envArg{f.flag, s})
	return nil
}

// forwardArg is one of -genvall, -genvnone, -genvlist (and Hydra's
// per-executable -envall, -envnone, -envlist: gangway runs one
// executable, so they mean the same), as given.
type forwardArg struct {
	flag  string
	mode  ForwardMode
	names []string
}

// forwardFlag is a -genvall or -genvnone switch.
type forwardFlag struct {
	v    *[]forwardArg
	flag string
	mode ForwardMode
}

func (f forwardFlag) String() string   { return "" }
func (f forwardFlag) IsBoolFlag() bool { return true }
func (f forwardFlag) Set(s string) error {
	if s != "true" {
		return fmt.Errorf("takes no value")
	}
	*f.v = append(*f.v, forwardArg{flag: f.flag, mode: f.mode})
	return nil
}

// registerForward registers Hydra's environment spellings: -genv and
// -env NAME VALUE (as -x NAME=VALUE), and what of the launcher's own
// environment the ranks get.
func registerForward(fs *flag.FlagSet, in *flagInputs) {
	for _, n := range []string{"genv", "env"} {
		fs.Var(envArgFlag{&in.exports, SrcGenv}, n, "NAME VALUE: set NAME=VALUE in every rank (Hydra; as -x NAME=VALUE)")
	}
	for _, n := range []string{"genvall", "envall"} {
		fs.Var(forwardFlag{&in.forward, "-" + n, ForwardAll}, n, "every rank gets the launcher's environment less host-specific names (the default; Hydra)")
	}
	for _, n := range []string{"genvnone", "envnone"} {
		fs.Var(forwardFlag{&in.forward, "-" + n, ForwardNone}, n, "ranks get none of the launcher's environment: only -x, -genv, --env-file over the host's own (Hydra)")
	}
	for _, n := range []string{"genvlist", "envlist"} {
		fs.Func(n, "NAME,NAME: ranks get only these variables of the launcher's environment (Hydra; repeatable)", func(s string) error {
			var names []string
			for _, k := range strings.Split(s, ",") {
				if !wire.ValidEnvName(k) {
					return fmt.Errorf("bad variable name %q in %q", k, s)
				}
				names = append(names, k)
			}
			in.forward = append(in.forward, forwardArg{flag: "-" + n, mode: ForwardList, names: names})
			return nil
		})
	}
}

// resolveForward sets Env.Forward and Env.ForwardList from the forwarding
// flags: one kind at most (-genvlist may repeat, its lists add up), as
// Hydra refuses -genvall with -genvnone.
func (c *Config) resolveForward() error {
	for _, f := range c.in.forward {
		if f.mode != c.in.forward[0].mode {
			return fmt.Errorf("%w: %s and %s: give one of -genvall, -genvnone, -genvlist", ErrUsage, c.in.forward[0].flag, f.flag)
		}
		c.Env.Forward = f.mode
		c.Env.ForwardList = append(c.Env.ForwardList, f.names...)
	}
	return nil
}
