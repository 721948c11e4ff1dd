package wire

import (
	"io"
	"sync"
)

// Read buffering. A launcher holds one Conn per host, most of them idle
// between a few small control frames, so a fixed large read buffer per
// Conn is most of the launcher's memory at a thousand hosts. A Conn
// instead reads into a small buffer of its own, and borrows a large one
// from a shared pool only while data arrives faster than it is read (a
// fill that filled the buffer is the sign), giving it back as soon as it
// is drained. A large buffer is never held by a Conn waiting for data,
// except when a fill that filled it happened to end exactly at a burst's
// end.
const (
	smallReadBuf = 2 << 10
	largeReadBuf = 64 << 10
)

var largeBufs = sync.Pool{New: func() any { return new([largeReadBuf]byte) }}

// reader is a buffered reader whose buffer grows from small to large on
// demand and shrinks back when drained. Not safe for concurrent use.
type reader struct {
	rd    io.Reader
	small []byte
	large *[largeReadBuf]byte // borrowed from largeBufs, nil when not held
	buf   []byte              // small, or large[:]
	r, w  int                 // buf[r:w] is unread
	full  bool                // the last fill filled buf: more is likely waiting
	err   error               // the underlying reader's error, returned once buf is drained
}

func newReader(rd io.Reader) *reader {
	return &reader{rd: rd, small: make([]byte, smallReadBuf)}
}

// Read reads up to len(p) bytes: from the buffer when it holds some, else
// straight into p when p is at least as large as the small buffer, else
// through one fill of the buffer.
func (b *reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.r == b.w {
		b.release()
		if b.err != nil {
			return 0, b.err
		}
		if len(p) >= smallReadBuf {
			// Straight into p, whatever the last fill said: a payload
			// needs no large buffer. A read that filled p says nothing
			// of what is left, so the next fill starts small.
			n, err := b.rd.Read(p)
			b.full = false
			b.err = err
			return n, err
		}
		if err := b.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	if b.r == b.w {
		b.release()
	}
	return n, nil
}

// fill reads once into an empty buffer: the large one when the last read
// filled what it was given, else the small one. An error that comes with
// bytes is kept for the Read after them. A read of no bytes and no error
// is tried again, as bufio does, a bounded number of times.
func (b *reader) fill() error {
	b.buf = b.small
	if b.full {
		b.large = largeBufs.Get().(*[largeReadBuf]byte)
		b.buf = b.large[:]
	}
	b.r, b.w = 0, 0
	for range 100 {
		n, err := b.rd.Read(b.buf)
		if n < 0 || n > len(b.buf) {
			panic("wire: reader returned an impossible count")
		}
		b.w = n
		b.full = n == len(b.buf)
		b.err = err
		if n > 0 {
			return nil
		}
		if err != nil {
			b.release()
			return err
		}
	}
	b.release()
	return io.ErrNoProgress
}

// release gives a drained large buffer back to the pool.
func (b *reader) release() {
	if b.large != nil && b.r == b.w {
		largeBufs.Put(b.large)
		b.large = nil
		b.buf = b.small
		b.r, b.w = 0, 0
	}
}
