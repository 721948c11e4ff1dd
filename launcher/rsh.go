package launcher

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/internal/osproc"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/diagnose"
	"github.com/gangway-hpc/gangway/launcher/engine"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// rsh is the launcher's `--rsh` mode, an ssh-compatible client for
// mpirun's plm_rsh_agent: `launcher --rsh [-p PORT] [-i KEY]
// [--known-hosts FILE] [--accept-new-host-keys] HOST COMMAND...` runs
// COMMAND (words joined by spaces, as ssh does) on HOST's agent and exits
// with its status (255 when the connection fails or the command dies of a
// signal, as ssh).
func rsh(ctx context.Context, args []string, d Deps) int {
	rc, ok := rshArgs(args, d.Stderr)
	if !ok {
		return 255
	}
	// A signal ends --rsh at once, in the handshake too: mpirun stops its
	// rsh agents with SIGTERM and expects them gone.
	ctx, scope := engine.Begin(ctx, d.Signals, 0)
	defer scope.End()
	interrupted := func() int {
		var se *diagnose.SignalError
		if errors.As(context.Cause(ctx), &se) {
			return osproc.SignalCode(se.Signal)
		}
		return 255
	}
	dialer, err := transport.NewAgentDialer(rc.opts, d.Log)
	if err != nil {
		fmt.Fprintf(d.Stderr, "launcher --rsh: %v\n", err)
		return 255
	}
	client, _, err := dialer.Client(ctx, rc.host)
	if err != nil {
		if ctx.Err() != nil {
			return interrupted()
		}
		fmt.Fprintf(d.Stderr, "launcher --rsh: %s: %v\n", rc.target, err)
		return 255
	}
	stopKeepalive := transport.Keepalive(client, nil)
	defer stopKeepalive()
	defer client.Close()
	sess, err := client.NewSession()
	if err != nil {
		fmt.Fprintf(d.Stderr, "launcher --rsh: %s: %v\n", rc.target, err)
		return 255
	}
	defer sess.Close()
	sess.Stdout, sess.Stderr = d.Stdout, d.Stderr
	if in, err := sess.StdinPipe(); err == nil && d.Stdin != nil {
		go func() { _, _ = io.Copy(in, d.Stdin); in.Close() }()
	}
	done := make(chan error, 1)
	go func() { done <- sess.Run(rc.command) }()
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
		fmt.Fprintf(d.Stderr, "launcher --rsh: %s: %v\n", rc.target, err)
		return 255
	}
}

// rshCommand is a parsed --rsh command line.
type rshCommand struct {
	opts    transport.Options // -p, -i, -F, --known-hosts, --accept-new-host-keys
	host    hostfile.Host
	target  string // HOST as given
	command string // COMMAND's words joined by spaces, as ssh does
}

// rshArgs parses --rsh's command line; ok is false, the error said on
// stderr, when it does not parse.
func rshArgs(args []string, stderr io.Writer) (rc rshCommand, ok bool) {
	fs := flag.NewFlagSet("launcher --rsh", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&rc.opts.Port, "p", cli.DefaultPort, "port")
	fs.StringVar(&rc.opts.Identity, "i", "", "identity")
	fs.StringVar(&rc.opts.KnownHosts, "known-hosts", "", "known_hosts")
	fs.BoolVar(&rc.opts.AcceptNewHosts, "accept-new-host-keys", false, "trust new host keys")
	fs.StringVar(&rc.opts.SSHConfig, "F", "", "ssh client configuration")
	fs.Bool("x", false, "no X11 forwarding (ignored)")
	if err := fs.Parse(args); err != nil {
		return rc, false
	}
	fs.Visit(func(f *flag.Flag) { rc.opts.PortGiven = rc.opts.PortGiven || f.Name == "p" })
	if fs.NArg() < 2 {
		fmt.Fprintln(stderr, "launcher --rsh: usage: launcher --rsh [options] HOST COMMAND...")
		return rc, false
	}
	rc.target = fs.Arg(0)
	hosts, err := hostfile.ParseList(rc.target)
	if err != nil || len(hosts) != 1 {
		fmt.Fprintf(stderr, "launcher --rsh: bad host %q\n", rc.target)
		return rc, false
	}
	rc.host, rc.command = hosts[0], strings.Join(fs.Args()[1:], " ")
	return rc, true
}
