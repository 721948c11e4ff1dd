package wire

import (
	"io"
	"net"
	"testing"
)

// BenchmarkRecvOutput: frames of rank output through a socket pair, as
// the launcher receives them, for small and large frames. Bytes per
// second is the payload rate.
func BenchmarkRecvOutput(b *testing.B) {
	for _, size := range []int{100, 4 << 10, 64 << 10} {
		b.Run(byteSize(size), func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			done := make(chan error, 1)
			data := pattern(size)
			n := b.N
			go func() {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					done <- err
					return
				}
				defer c.Close()
				w := NewConn(c)
				for range n {
					if err := w.SendOutput(1, Stdout, data); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			s, err := ln.Accept()
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			r := NewConn(s)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for range n {
				m, err := r.Recv()
				if err != nil {
					b.Fatal(err)
				}
				if _, _, d, err := m.Output(); err != nil || len(d) != size {
					b.Fatalf("frame of %d bytes: %v", len(d), err)
				}
			}
			if err := <-done; err != nil && err != io.EOF {
				b.Fatal(err)
			}
		})
	}
}

func byteSize(n int) string {
	switch {
	case n >= 1<<10:
		return itoa(n>>10) + "KiB"
	}
	return itoa(n) + "B"
}
