package nccl

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Problem is one doubtful NCCL setting.
type Problem struct {
	Var   string
	Value string
	Host  string // the host it concerns; "" for every host
	Msg   string
}

func (p Problem) Error() string {
	var b strings.Builder
	if p.Host != "" {
		b.WriteString("host " + p.Host + ": ")
	}
	fmt.Fprintf(&b, "%s=%q: %s", p.Var, p.Value, p.Msg)
	return b.String()
}

// pathLevels are the names NCCL_P2P_LEVEL and NCCL_NET_GDR_LEVEL accept
// (case-sensitive); old integers 0-5 map to LOC, PIX, PXB, PHB, SYS, SYS.
var pathLevels = []string{"LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS"}

// debugLevels are NCCL_DEBUG's values (compared without case).
var debugLevels = []string{"VERSION", "WARN", "INFO", "ABORT", "TRACE"}

// intVars are integer parameters NCCL parses with strtoll(s, &end, 0),
// ignoring a value with trailing junk.
var intVars = []string{
	"NCCL_IB_GID_INDEX", "NCCL_IB_DISABLE", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE",
	"NCCL_NET_GDR_READ", "NCCL_NET_GDR_C2C", "NCCL_IB_TIMEOUT", "NCCL_IB_RETRY_CNT",
	"NCCL_IB_ROCE_VERSION_NUM", "NCCL_IB_QPS_PER_CONNECTION", "NCCL_CROSS_NIC",
	"NCCL_NSOCKS_PERTHREAD", "NCCL_SOCKET_NTHREADS", "NCCL_BUFFSIZE", "NCCL_NTHREADS",
	"NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS",
}

// Check validates the NCCL variables a user set (env: the ranks'
// variables, -x's) against NCCL's parsers and the hosts' interfaces and
// HCA ports:
//
//   - NCCL_SOCKET_IFNAME and NCCL_IB_HCA: list syntax; "=^" (the "^" is
//     then part of a name); a list that selects nothing on some host;
//     NCCL_SOCKET_IFNAME of one character, which NCCL ignores;
//   - NCCL_P2P_LEVEL, NCCL_NET_GDR_LEVEL: a level name or an old integer;
//   - NCCL_DEBUG: a known level; NCCL_SOCKET_FAMILY, NCCL_IB_ADDR_FAMILY:
//     AF_INET or AF_INET6; NCCL_IB_ADDR_RANGE: a CIDR;
//   - NCCL_IB_GID_INDEX and other integer parameters: an integer.
//
// Other variables are not judged. Problems come in a stable order: by
// variable name, then by host in the order given.
func Check(env map[string]string, hosts []HostNet) []Problem {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var probs []Problem
	for _, k := range keys {
		for _, f := range checkVar(k, env[k], hosts) {
			probs = append(probs, Problem{Var: k, Value: env[k], Host: f.host, Msg: f.msg})
		}
	}
	return probs
}

// finding is one problem of a variable, on one host or ("") on all.
type finding struct{ host, msg string }

// all is a problem that concerns every host.
func all(msg string) []finding { return []finding{{msg: msg}} }

// checkVar returns the problems of one variable.
func checkVar(k, v string, hosts []HostNet) []finding {
	switch {
	case k == "NCCL_SOCKET_IFNAME":
		if len(v) <= 1 {
			return all("ignored by NCCL: the value must be longer than one character")
		}
		return checkList(v, hosts, ifaceMatches)
	case k == "NCCL_IB_HCA":
		return checkList(v, hosts, hcaMatches)
	case k == "NCCL_P2P_LEVEL" || k == "NCCL_NET_GDR_LEVEL":
		return checkLevel(v)
	case k == "NCCL_DEBUG":
		if !slices.ContainsFunc(debugLevels, func(l string) bool { return strings.EqualFold(l, v) }) {
			return all("unknown level; want one of " + strings.Join(debugLevels, ", "))
		}
	case k == "NCCL_SOCKET_FAMILY" || k == "NCCL_IB_ADDR_FAMILY":
		if v != "AF_INET" && v != "AF_INET6" {
			return all("want AF_INET or AF_INET6")
		}
	case k == "NCCL_IB_ADDR_RANGE":
		if _, err := netip.ParsePrefix(v); err != nil {
			return all("not a CIDR such as 10.0.0.0/16: " + err.Error())
		}
	case slices.Contains(intVars, k):
		if _, ok := parseCInt(v); !ok {
			return all("not an integer: NCCL ignores it and uses the default")
		}
	}
	return nil
}

// parseCInt parses an integer like C's strtoll(s, &end, 0) with *end == 0:
// decimal, 0x hexadecimal or 0 octal, optional sign.
func parseCInt(s string) (int64, bool) {
	if strings.Contains(s, "_") || strings.HasPrefix(s, "0b") || strings.HasPrefix(s, "0o") {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 0, 64)
	return n, err == nil
}

func checkLevel(v string) []finding {
	if slices.Contains(pathLevels, v) {
		return nil
	}
	if v != "" && v[0] >= '0' && v[0] <= '9' {
		n, ok := parseCInt(v)
		switch {
		case !ok:
			return all("not a level name or integer")
		case n > 5:
			return all("old integer level above 5: NCCL treats it as SYS")
		}
		return nil
	}
	if slices.ContainsFunc(pathLevels, func(l string) bool { return strings.EqualFold(l, v) }) {
		return all("level names are case-sensitive: write " + strings.ToUpper(v))
	}
	return all("unknown level; want one of " + strings.Join(pathLevels, ", ") + " or 0-5")
}

// checkList parses an NCCL list and checks that it selects something on
// every host, as told by matches ("" when it does, else a message).
func checkList(v string, hosts []HostNet, matches func(list, HostNet) string) []finding {
	l, err := parseList(v)
	if err != nil {
		return all(err.Error())
	}
	var out []finding
	if l.Exact && len(l.Entries) > 0 && strings.HasPrefix(l.Entries[0].Name, "^") {
		out = append(out, finding{msg: `"=^" makes "^" part of the name; write "^=" to exclude exact names`})
	}
	for _, h := range hosts {
		if msg := matches(l, h); msg != "" {
			out = append(out, finding{host: h.Host, msg: msg})
		}
	}
	return out
}

// ifaceMatches is NCCL's socket interface search: up interfaces with an
// address that the list selects.
func ifaceMatches(l list, h HostNet) string {
	var have []string
	for _, n := range h.NICs {
		if !n.Up || len(n.Addrs) == 0 {
			continue
		}
		if l.Match(n.Name, -1) {
			return ""
		}
		have = append(have, n.Name)
	}
	return "selects no up interface with an address (up: " + strings.Join(have, ", ") + ")"
}

// hcaMatches looks for an ACTIVE port the list selects. Hosts that reported
// no HCAs are not judged.
func hcaMatches(l list, h HostNet) string {
	if len(h.HCAs) == 0 {
		return ""
	}
	active := activeHCAs(h.HCAs)
	for _, a := range active {
		name, port, _ := strings.Cut(a, ":")
		p, _ := strconv.Atoi(port)
		if l.Match(name, p) {
			return ""
		}
	}
	return "selects no ACTIVE HCA port (active: " + strings.Join(active, ", ") + ")"
}
