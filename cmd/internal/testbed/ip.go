package testbed

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// runIP runs `ip args...` and returns its stdout; the error names the
// command and carries its stderr.
func runIP(ctx context.Context, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// runBatch feeds script to `ip [-n ns] -batch -`, one exec for many steps.
// The error carries ip's stderr, which names the failing line, and the
// script itself.
func runBatch(ctx context.Context, ns, script string) error {
	if script == "" {
		return nil
	}
	args := []string{"-batch", "-"}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stdin = strings.NewReader(script)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %w: %s\nscript:\n%s", strings.Join(args, " "), err, strings.TrimSpace(out.String()), script)
	}
	return nil
}

// listNetns returns the names of all named network namespaces.
func listNetns(ctx context.Context) ([]string, error) {
	out, err := runIP(ctx, "netns", "list")
	if err != nil {
		return nil, err
	}
	var names []string
	for line := range strings.Lines(out) {
		// "gwt3h0 (id: 4)" or just "gwt3h0".
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names, nil
}

// link is one line of `ip -o link`.
type link struct {
	Index int
	Name  string
}

// listLinks returns the links of namespace ns ("" for the root namespace).
func listLinks(ctx context.Context, ns string) ([]link, error) {
	args := []string{"-o", "link", "show"}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	out, err := runIP(ctx, args...)
	if err != nil {
		return nil, err
	}
	return parseLinks(out)
}

// parseLinks parses `ip -o link` output: "5: gwt3v0@if2: <BROADCAST,...".
func parseLinks(out string) ([]link, error) {
	var links []link
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		idx, err := strconv.Atoi(strings.TrimSuffix(f[0], ":"))
		if err != nil {
			return nil, fmt.Errorf("ip -o link: bad line %q", strings.TrimSpace(line))
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		links = append(links, link{Index: idx, Name: name})
	}
	return links, nil
}
