package launcher

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/diagnose"
	"github.com/gangway-hpc/gangway/launcher/engine"
	"github.com/gangway-hpc/gangway/launcher/health"
	"github.com/gangway-hpc/gangway/launcher/rankenv"
	"github.com/gangway-hpc/gangway/nccl"
)

// InspectHost is one host in --inspect's output.
type InspectHost struct {
	Host    string     `json:"host"`
	Reached string     `json:"reached_at"`
	Facts   wire.Facts `json:"facts"`
	// Interfaces and Addr are the data network chosen for the host.
	Interfaces []string `json:"interfaces,omitempty"`
	Addr       string   `json:"addr,omitempty"`
	GPUs       []int    `json:"gpus,omitempty"` // GPUs its ranks would get, in order
	// Env are the network variables (NCCL_*, GLOO_*, HOROVOD_GLOO_*) its
	// ranks get, exactly (rankenv.NetVars), and CUDA_VISIBLE_DEVICES;
	// EnvFrom says where each came from (nccl: the host's choice,
	// forwarded, -x, -genv, --env-file).
	Env     []string          `json:"env"`
	EnvFrom map[string]string `json:"env_from,omitempty"`
	// NCCL are the NCCL variables of -x that look wrong on this host
	// (rankenv.CheckNCCL): a list that selects nothing here, a value
	// NCCL does not read.
	NCCL []string `json:"nccl_problems,omitempty"`
	// Health is every check of the host for this attempt (the agent's,
	// then those that compare hosts); empty with --no-health-check.
	Health []wire.Check `json:"health,omitempty"`
	Err    string       `json:"error,omitempty"`
}

// inspect reaches every host of l (rankenv.Reach), then prints its facts
// and the environment the launcher would set there, as a table or
// (--json) JSON.
func inspect(ctx context.Context, cfg cli.Config, d engine.Deps, l rankenv.Layout) int {
	ctx, scope := engine.Begin(ctx, d.Signals, 0)
	defer scope.End()
	c, err := engine.Dial(ctx, cfg, d, "inspect-"+engine.NewJobID(), l)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			err = cause
		}
		fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
		return diagnose.ExitCode(err, false)
	}
	defer c.Close()
	out, cerr := inspectHosts(cfg, c.Hosts())
	verdict := c.Health(cfg.Health)
	for i, h := range verdict {
		// One place for the checks: the verdict has the agent's and
		// the launcher's.
		out[i].Health, out[i].Facts.Health = h.Checks, nil
	}
	if cfg.Out.JSON {
		enc := json.NewEncoder(d.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			fmt.Fprintf(d.Stderr, "launcher: %v\n", err)
			return diagnose.ExitSetup
		}
	} else {
		writeInspect(d.Stdout, out, cfg.Out.Verbose)
	}
	if cerr != nil {
		fmt.Fprintf(d.Stderr, "launcher: %v\n", cerr)
		return diagnose.ExitSetup
	}
	if bad := health.Unhealthy(verdict); len(bad) > 0 {
		var names []string
		for _, i := range bad {
			names = append(names, verdict[i].Label())
		}
		fmt.Fprintf(d.Stderr, "launcher: %d of %d hosts failed health checks (a job would not start): %s\n", len(bad), len(verdict), strings.Join(names, ", "))
		return diagnose.ExitSetup
	}
	return 0
}

// inspectHosts is what --inspect shows of each host: its facts, the data
// network chosen for it (the choice's error, when it fails, is also
// returned), the GPUs and variables its ranks would get, and the NCCL
// variables of -x that look wrong there.
func inspectHosts(cfg cli.Config, hosts []rankenv.Host) ([]InspectHost, error) {
	choices, cerr := rankenv.ChooseNetworks(cfg.Network, hosts)
	probs := rankenv.CheckNCCL(cfg.Env.Vars, hosts)
	out := make([]InspectHost, len(hosts))
	for i, h := range hosts {
		ih := InspectHost{Host: h.Name, Reached: h.Reached, Facts: h.Facts}
		var c *nccl.Choice
		if cerr == nil {
			c = choices[i]
		} else {
			ih.Err = cerr.Error()
		}
		if c != nil {
			ih.Interfaces, ih.Addr = c.Ifaces, c.Addr
		}
		if cerr == nil {
			for _, v := range rankenv.NetVars(cfg, c) {
				ih.Env = append(ih.Env, v.Key+"="+v.Value)
				if ih.EnvFrom == nil {
					ih.EnvFrom = map[string]string{}
				}
				ih.EnvFrom[v.Key] = v.Src
			}
		}
		if g, err := rankenv.ChooseGPUs(cfg.Place, h, max(h.Slots, 1)); err == nil && g != nil {
			ih.GPUs = g
			ih.Env = append(ih.Env, "CUDA_VISIBLE_DEVICES="+nccl.CUDAVisibleDevices(g)+" (all local ranks; one each by local rank)")
		} else if err != nil && ih.Err == "" {
			ih.Err = err.Error()
		}
		for _, p := range probs {
			if p.Host == "" || p.Host == h.Name {
				p.Host = ""
				ih.NCCL = append(ih.NCCL, p.Error())
			}
		}
		out[i] = ih
	}
	return out, cerr
}

// writeInspect prints the table and each host's section. Without verbose
// the sections leave out the NICs no rank could use (shownNIC); --json
// and -v list every one.
func writeInspect(w io.Writer, hosts []InspectHost, verbose bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tREACHED\tCPUS\tNUMA\tGPUS\tDATA NIC\tADDR\tHCAS\tHEALTH")
	for _, h := range hosts {
		var hcas []string
		for _, c := range h.Facts.HCAs {
			hcas = append(hcas, fmt.Sprintf("%s:%d(%s)", c.Name, c.Port, c.State))
		}
		nic := strings.Join(h.Interfaces, ",")
		if nic == "" {
			nic = "(NCCL default)"
			if v, ok := envValue(h.Env, "NCCL_SOCKET_IFNAME"); ok {
				nic = v + " (" + h.EnvFrom["NCCL_SOCKET_IFNAME"] + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", h.Host, h.Reached, h.Facts.CPUs, h.Facts.NUMANodes, len(h.Facts.GPUs), nic, dash(h.Addr), dash(strings.Join(hcas, " ")), healthCell(h.Health))
	}
	tw.Flush()
	for _, h := range hosts {
		fmt.Fprintf(w, "\n# %s (%s, agent %s)\n", h.Host, h.Facts.Hostname, h.Facts.Agent)
		hidden := 0
		for _, n := range h.Facts.NICs {
			if !verbose && !shownNIC(n, h.Interfaces) {
				hidden++
				continue
			}
			state := "down"
			if n.Up {
				state = "up"
			}
			speed := "-"
			if n.SpeedMbps > 0 {
				speed = strconv.Itoa(n.SpeedMbps) + "Mb/s"
			}
			fmt.Fprintf(w, "nic   %-12s %-8s %-4s mtu %-5d %-9s %s\n", n.Name, n.Type, state, n.MTU, speed, strings.Join(n.Addrs, " "))
		}
		if hidden > 0 {
			fmt.Fprintf(w, "nic   (%d more: down, or no address but link-local; -v lists them)\n", hidden)
		}
		for _, r := range h.Facts.Routes {
			via := r.Iface
			if via == "" {
				via = "UNREACHABLE " + r.Err
			}
			fmt.Fprintf(w, "route %s (%s) via %s\n", r.Peer, r.Addr, via)
		}
		for _, g := range h.Facts.GPUs {
			fmt.Fprintf(w, "gpu   %s\n", gpuLine(g))
		}
		if h.Facts.Containment != "" {
			fmt.Fprintf(w, "ranks %s\n", h.Facts.Containment)
		}
		for _, c := range h.Health {
			fmt.Fprintf(w, "health %-11s %-11s %s\n", c.Name, c.Status, c.Detail)
			if out := strings.TrimRight(c.Output, "\n"); out != "" {
				for l := range strings.SplitSeq(out, "\n") {
					fmt.Fprintf(w, "       | %s\n", l)
				}
			}
		}
		for _, e := range h.Facts.DiscoveryErrs {
			fmt.Fprintf(w, "note  %s\n", e)
		}
		for _, kv := range h.Env {
			if k, _, _ := strings.Cut(kv, "="); h.EnvFrom[k] != "" {
				fmt.Fprintf(w, "env   %s   # %s\n", kv, h.EnvFrom[k])
			} else {
				fmt.Fprintf(w, "env   %s\n", kv)
			}
		}
		if len(h.Interfaces) == 0 && h.Err == "" {
			if _, ok := envValue(h.Env, "NCCL_SOCKET_IFNAME"); !ok {
				fmt.Fprintf(w, "env   (no NCCL_SOCKET_IFNAME: one host, NCCL's and Gloo's own choice)\n")
			}
		}
		for _, p := range h.NCCL {
			fmt.Fprintf(w, "warn  %s\n", p)
		}
		if h.Err != "" {
			fmt.Fprintf(w, "error %s\n", h.Err)
		}
	}
}

// healthCell is the table's HEALTH: "-" when not checked at all, "ok"
// (with how many checks could not run), or FAIL with the failed checks'
// names.
func healthCell(checks []wire.Check) string {
	if len(checks) == 0 {
		return "-"
	}
	var failed []string
	unchecked := 0
	for _, c := range checks {
		switch c.Status {
		case wire.CheckFail:
			failed = append(failed, c.Name)
		case wire.CheckNotChecked:
			unchecked++
		}
	}
	switch {
	case len(failed) > 0:
		return "FAIL " + strings.Join(failed, ",")
	case unchecked > 0:
		return fmt.Sprintf("ok (%d not checked)", unchecked)
	}
	return "ok"
}

// envValue is the value of k among KEY=VALUE entries.
func envValue(env []string, k string) (string, bool) {
	for _, kv := range env {
		if ek, v, _ := strings.Cut(kv, "="); ek == k {
			return v, true
		}
	}
	return "", false
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shownNIC reports whether --inspect's section lists n without -v: it is
// a chosen data interface, or it is up with an address that is not
// link-local (169.254/16, fe80::/10).
func shownNIC(n wire.NIC, chosen []string) bool {
	if slices.Contains(chosen, n.Name) {
		return true
	}
	if !n.Up {
		return false
	}
	for _, a := range n.Addrs {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return true // not ours to judge: show it
		}
		if !p.Addr().IsLinkLocalUnicast() {
			return true
		}
	}
	return false
}

// gpuLine describes a GPU for --inspect: index, name, bus id, its NUMA
// node ("unknown" when neither sysfs nor nvidia-smi says), where the node
// came from when it was not sysfs, and the CPUs near it.
func gpuLine(g wire.GPU) string {
	numa := "unknown"
	if g.NUMANode >= 0 {
		numa = strconv.Itoa(g.NUMANode)
	}
	s := fmt.Sprintf("%d %s %s numa %s", g.Index, g.Name, g.BusID, numa)
	if g.CPUs != "" {
		s += " cpus " + g.CPUs
	}
	if g.NUMAFrom == "nvidia-smi" {
		s += " (from nvidia-smi topo -m: sysfs numa_node is -1)"
	}
	return s
}
