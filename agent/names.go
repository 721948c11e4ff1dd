package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gangway-hpc/gangway/agent/pmi"
	"github.com/gangway-hpc/gangway/agent/wire"
)

// launcherNames is the PMI name service of a job: the launcher keeps the
// job's one table, so a name published on this host is found from every
// other. Each call sends a Name and waits for the NameReply with its ID;
// the launcher answers every request at once.
type launcherNames struct {
	conn *wire.Conn
	mu   sync.Mutex
	next uint64
	wait map[uint64]chan wire.NameReply
}

var _ pmi.Names = (*launcherNames)(nil)

func (n *launcherNames) ask(ctx context.Context, req wire.Name) (wire.NameReply, error) {
	if len(req.Service) > wire.MaxNameLen || len(req.Port) > wire.MaxNameLen {
		return wire.NameReply{}, fmt.Errorf("service name or port longer than %d bytes", wire.MaxNameLen)
	}
	ch := make(chan wire.NameReply, 1)
	n.mu.Lock()
	n.next++
	req.ID = n.next
	n.wait[req.ID] = ch
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.wait, req.ID)
		n.mu.Unlock()
	}()
	if err := n.conn.Send(wire.KindName, req); err != nil {
		return wire.NameReply{}, err
	}
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		return wire.NameReply{}, context.Cause(ctx)
	}
}

// answer hands the launcher's reply to the call waiting for it; a reply
// nobody waits for any more (the rank is gone) is dropped.
func (n *launcherNames) answer(r wire.NameReply) {
	n.mu.Lock()
	ch := n.wait[r.ID]
	delete(n.wait, r.ID)
	n.mu.Unlock()
	if ch != nil {
		ch <- r
	}
}

// status turns a reply's status into the pmi package's answer.
func nameStatus(r wire.NameReply) error {
	switch r.Status {
	case wire.NameOK:
		return nil
	case wire.NameNotFound:
		return pmi.ErrNameNotFound
	case wire.NameExists:
		return pmi.ErrNameExists
	case wire.NameFull:
		return errors.New("the job's name table is full")
	}
	return fmt.Errorf("name service: status %q", r.Status)
}

func (n *launcherNames) Publish(ctx context.Context, service, port string) error {
	r, err := n.ask(ctx, wire.Name{Op: wire.NamePublish, Service: service, Port: port})
	if err != nil {
		return err
	}
	return nameStatus(r)
}

func (n *launcherNames) Unpublish(ctx context.Context, service string) error {
	r, err := n.ask(ctx, wire.Name{Op: wire.NameUnpublish, Service: service})
	if err != nil {
		return err
	}
	return nameStatus(r)
}

func (n *launcherNames) Lookup(ctx context.Context, service string) (string, error) {
	r, err := n.ask(ctx, wire.Name{Op: wire.NameLookup, Service: service})
	if err != nil {
		return "", err
	}
	return r.Port, nameStatus(r)
}
