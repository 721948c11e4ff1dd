package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// chunked returns its data in reads of the given sizes, in turn, then the
// rest in one read, then err.
type chunked struct {
	data  []byte
	sizes []int
	i     int
	err   error
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, c.err
	}
	n := len(c.data)
	if len(c.sizes) > 0 {
		n = min(n, c.sizes[c.i%len(c.sizes)])
		c.i++
	}
	n = copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// TestReaderBytes: whatever the sizes the stream arrives in and the
// sizes it is read in, the bytes come out whole and in order, then the
// stream's error.
func TestReaderBytes(t *testing.T) {
	data := pattern(300 << 10)
	for _, tc := range []struct {
		name   string
		arrive []int
		read   []int
	}{
		{"one stream, 5-byte reads", nil, []int{5}},
		{"small arrivals, frame-like reads", []int{100, 7, 3000}, []int{5, 1000, 5, 70000}},
		{"bursts larger than the buffers", []int{200 << 10}, []int{5, 3 << 10, 64 << 10, 1}},
		{"exactly the small buffer", []int{smallReadBuf}, []int{5, smallReadBuf - 5, 1, 17}},
		{"exactly the large buffer", []int{largeReadBuf}, []int{1, largeReadBuf, 2 << 10}},
		{"single bytes", []int{1}, []int{3, 9000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReader(&chunked{data: data, sizes: tc.arrive, err: io.ErrClosedPipe})
			var got []byte
			for i := 0; ; i++ {
				p := make([]byte, tc.read[i%len(tc.read)])
				n, err := r.Read(p)
				got = append(got, p[:n]...)
				if err != nil {
					if !errors.Is(err, io.ErrClosedPipe) {
						t.Fatalf("error %v, want the stream's", err)
					}
					break
				}
				if i > 1<<20 {
					t.Fatal("no end")
				}
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("read %d bytes, differing from the %d sent", len(got), len(data))
			}
			if _, err := r.Read(make([]byte, 10)); !errors.Is(err, io.ErrClosedPipe) {
				t.Errorf("read after the end: %v, want the stream's error again", err)
			}
		})
	}
}

// TestReaderLargeBufferOnlyWhileBusy: a reader borrows the large buffer
// when a read filled the small one, and gives it back once drained.
func TestReaderLargeBufferOnlyWhileBusy(t *testing.T) {
	src := &chunked{data: pattern(10 << 10)}
	r := newReader(src)
	p := make([]byte, 5)
	if _, err := io.ReadFull(r, p); err != nil {
		t.Fatal(err)
	}
	if r.large != nil {
		t.Fatal("large buffer taken by the first fill")
	}
	if _, err := io.ReadFull(r, make([]byte, smallReadBuf-5)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(r, p); err != nil {
		t.Fatal(err)
	}
	if r.large == nil {
		t.Fatal("a fill that filled the small buffer was not followed by a large one")
	}
	if _, err := io.ReadFull(r, make([]byte, 10<<10-smallReadBuf-5)); err != nil {
		t.Fatal(err)
	}
	if r.large != nil {
		t.Error("large buffer kept after it was drained")
	}
	// A payload of at least the small buffer's size goes straight into
	// the caller's slice even right after a full fill, and says nothing
	// of what follows: the next header waits in the small buffer.
	r = newReader(&chunked{data: pattern(2*smallReadBuf + 100)})
	if _, err := io.ReadFull(r, make([]byte, smallReadBuf)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(r, make([]byte, smallReadBuf)); err != nil || r.large != nil {
		t.Fatalf("payload read after a full fill: %v, large buffer taken: %v", err, r.large != nil)
	}
	r = newReader(&chunked{data: pattern(smallReadBuf + 100)})
	if _, err := io.ReadFull(r, make([]byte, smallReadBuf)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(r, p); err != nil {
		t.Fatal(err)
	}
	if r.large != nil {
		t.Error("large buffer taken after a direct read")
	}
}

// TestReaderNoProgress: a stream that returns nothing forever is an
// error, not a hang; iotest's checks pass.
func TestReaderNoProgress(t *testing.T) {
	r := newReader(iotest.ErrReader(nil))
	if _, err := r.Read(make([]byte, 10)); !errors.Is(err, io.ErrNoProgress) {
		t.Errorf("Read: %v, want no progress", err)
	}
	if err := iotest.TestReader(newReader(iotest.HalfReader(bytes.NewReader(pattern(100<<10)))), pattern(100<<10)); err != nil {
		t.Error(err)
	}
}

// FuzzReader: any arrival and read sizes give back the stream.
func FuzzReader(f *testing.F) {
	f.Add(pattern(5000), uint16(7), uint16(5), uint16(3000))
	f.Add(pattern(70000), uint16(smallReadBuf), uint16(smallReadBuf), uint16(1))
	f.Add([]byte{}, uint16(0), uint16(1), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, arrive, read1, read2 uint16) {
		var sizes []int
		if arrive > 0 {
			sizes = []int{int(arrive), 1}
		}
		r := newReader(&chunked{data: data, sizes: sizes, err: io.EOF})
		var got []byte
		for i := 0; i < 4*len(data)+10; i++ {
			p := make([]byte, max(1, int([]uint16{read1, read2}[i%2])))
			n, err := r.Read(p)
			got = append(got, p[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("got %d bytes, want %d", len(got), len(data))
		}
	})
}
