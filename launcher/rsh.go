package launcher

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"golang.org/x/crypto/ssh"

	"gangway/hostfile"
	"gangway/launcher/cli"
	"gangway/launcher/diagnose"
	"gangway/launcher/transport"
)

// Rsh is the launcher's `--rsh` mode, an ssh-compatible client for
// mpirun's plm_rsh_agent: `launcher --rsh [-p PORT] [-i KEY]
// [--known-hosts FILE] [--accept-new-host-keys] HOST COMMAND...` runs
// COMMAND (words joined by spaces, as ssh does) on HOST's agent and exits
// with its status (255 when the connection fails or the command dies of a
// signal, as ssh).
func Rsh(ctx context.Context, args []string, d Deps) int {
	fs := flag.NewFlagSet("launcher --rsh", flag.ContinueOnError)
	fs.SetOutput(d.Stderr)
	var cfg transport.Options
	fs.IntVar(&cfg.Port, "p", cli.DefaultPort, "port")
	fs.StringVar(&cfg.Identity, "i", "", "identity")
	fs.StringVar(&cfg.KnownHosts, "known-hosts", "", "known_hosts")
	fs.BoolVar(&cfg.AcceptNewHosts, "accept-new-host-keys", false, "trust new host keys")
	fs.Bool("x", false, "no X11 forwarding (ignored)")
	if err := fs.Parse(args); err != nil {
		return 255
	}
	if fs.NArg() < 2 {
		fmt.Fprintln(d.Stderr, "launcher --rsh: usage: launcher --rsh [options] HOST COMMAND...")
		return 255
	}
	hosts, err := hostfile.ParseList(fs.Arg(0))
	if err != nil || len(hosts) != 1 {
		fmt.Fprintf(d.Stderr, "launcher --rsh: bad host %q\n", fs.Arg(0))
		return 255
	}
	// A signal ends --rsh at once, in the handshake too: mpirun stops its
	// rsh agents with SIGTERM and expects them gone.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sigs := watchSignals(d.Signals, cancel)
	defer sigs.stop()
	interrupted := func() int {
		var se *diagnose.SignalError
		if errors.As(context.Cause(ctx), &se) {
			return 128 + int(se.Signal)
		}
		return 255
	}
	dialer, err := transport.NewAgentDialer(cfg, d.Log)
	if err != nil {
		fmt.Fprintf(d.Stderr, "launcher --rsh: %v\n", err)
		return 255
	}
	client, _, err := dialer.Client(ctx, hosts[0])
	if err != nil {
		if ctx.Err() != nil {
			return interrupted()
		}
		fmt.Fprintf(d.Stderr, "launcher --rsh: %s: %v\n", fs.Arg(0), err)
		return 255
	}
	stopKeepalive := transport.Keepalive(client, nil)
	defer stopKeepalive()
	defer client.Close()
	sess, err := client.NewSession()
	if err != nil {
		fmt.Fprintf(d.Stderr, "launcher --rsh: %s: %v\n", fs.Arg(0), err)
		return 255
	}
	defer sess.Close()
	sess.Stdout, sess.Stderr = d.Stdout, d.Stderr
	if in, err := sess.StdinPipe(); err == nil && d.Stdin != nil {
		go func() { _, _ = io.Copy(in, d.Stdin); in.Close() }()
	}
	done := make(chan error, 1)
	go func() { done <- sess.Run(strings.Join(fs.Args()[1:], " ")) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		// Like ssh: the connection goes, and the agent stops the command.
		client.Close()
		<-done
		return interrupted()
	}
	var ee *ssh.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee) && ee.Signal() == "":
		return ee.ExitStatus()
	default:
		fmt.Fprintf(d.Stderr, "launcher --rsh: %s: %v\n", fs.Arg(0), err)
		return 255
	}
}
