package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

const testToken = "0123456789abcdef0123456789abcdef"

func TestSelftestValidate(t *testing.T) {
	send := Selftest{Op: SelftestSend, Token: testToken, Target: "198.18.0.2:4000", Bytes: 64 << 20, Within: 2 * time.Second}
	with := func(f func(*Selftest)) Selftest { s := send; f(&s); return s }
	for _, tc := range []struct {
		name string
		s    Selftest
		want string // "" for valid
	}{
		{"send", send, ""},
		{"send v6", with(func(s *Selftest) { s.Target = "[fd00::2]:4000" }), ""},
		{"listen", Selftest{Op: SelftestListen, Token: testToken}, ""},
		{"close", Selftest{Op: SelftestClose, Token: testToken}, ""},
		{"unknown op", Selftest{Op: "flood", Token: testToken}, `unknown op "flood"`},
		{"short token", with(func(s *Selftest) { s.Token = "abc" }), "token of 3 characters"},
		{"upper-case token", with(func(s *Selftest) { s.Token = strings.ToUpper(testToken) }), "not lower-case hex"},
		{"listen with target", Selftest{Op: SelftestListen, Token: testToken, Target: "198.18.0.2:1"}, "for send only"},
		{"name target", with(func(s *Selftest) { s.Target = "example.com:80" }), "literal IP address"},
		{"no port", with(func(s *Selftest) { s.Target = "198.18.0.2" }), "missing port"},
		{"port 0", with(func(s *Selftest) { s.Target = "198.18.0.2:0" }), "bad port"},
		{"port 70000", with(func(s *Selftest) { s.Target = "198.18.0.2:70000" }), "bad port"},
		{"no bytes", with(func(s *Selftest) { s.Bytes = 0 }), "0 bytes, want 1 to"},
		{"too many bytes", with(func(s *Selftest) { s.Bytes = MaxSelftestBytes + 1 }), "want 1 to 4294967296"},
		{"no time", with(func(s *Selftest) { s.Within = 0 }), "within 0s"},
		{"too long", with(func(s *Selftest) { s.Within = time.Hour }), "at most 1m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate(%+v) = %v, want %q", tc.s, err, tc.want)
			}
		})
	}
}

func TestStreamHello(t *testing.T) {
	h := StreamHello(testToken, 1<<20)
	if len(h) != StreamHelloLen {
		t.Fatalf("hello of %d bytes, want %d", len(h), StreamHelloLen)
	}
	tok, n, err := ParseStreamHello(h)
	if err != nil || tok != testToken || n != 1<<20 {
		t.Fatalf("ParseStreamHello = %q %d %v", tok, n, err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"short", h[:10], "not a gangway self-test hello"},
		{"http", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n" + strings.Repeat("x", StreamHelloLen-27)), "not a gangway self-test hello"},
		{"bad token", StreamHello(strings.Repeat("Z", SelftestTokenLen), 1), "not lower-case hex"},
		{"zero bytes", StreamHello(testToken, 0), "0 bytes announced"},
		{"too many", StreamHello(testToken, MaxSelftestBytes+1), "bytes announced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := ParseStreamHello(tc.b); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseStreamHello: %v, want %q", err, tc.want)
			}
		})
	}
}

// FuzzSelftestDecode: a Selftest payload from a launcher, decoded and
// validated as the agent does, never panics, and what Validate accepts
// is within the agent's bounds and survives a round trip.
func FuzzSelftestDecode(f *testing.F) {
	for _, s := range []Selftest{
		{Op: SelftestSend, Token: testToken, Target: "198.18.0.2:4000", Bytes: 64 << 20, Within: 2 * time.Second},
		{Op: SelftestListen, Token: testToken},
		{Op: SelftestClose, Token: testToken},
		{Op: SelftestSend, Token: testToken, Target: "[::1]:1", Bytes: MaxSelftestBytes + 1, Within: -1},
	} {
		b, _ := json.Marshal(s)
		f.Add(b)
	}
	f.Add([]byte(`{"op":"send","token":"` + testToken + `","target":"10.0.0.1:22","bytes":1e30}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var s Selftest
		if (Msg{Kind: KindSelftest, Payload: in}).Decode(&s) != nil || s.Validate() != nil {
			return
		}
		if s.Op == SelftestSend && (s.Bytes < 1 || s.Bytes > MaxSelftestBytes || s.Within <= 0 || s.Within > MaxSelftestTime) {
			t.Fatalf("accepted %+v", s)
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back Selftest
		if err := json.Unmarshal(b, &back); err != nil || back != s {
			t.Fatalf("round trip %+v -> %s -> %+v %v", s, b, back, err)
		}
	})
}

// FuzzParseStreamHello: a sink parses any first bytes of a connection
// without panicking, accepts only what StreamHello writes, within bounds.
func FuzzParseStreamHello(f *testing.F) {
	f.Add(StreamHello(testToken, 1))
	f.Add(StreamHello(testToken, MaxSelftestBytes))
	f.Add(StreamHello(testToken, 0))
	f.Add([]byte("SSH-2.0-OpenSSH_9.2\r\n"))
	f.Add(make([]byte, StreamHelloLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, n, err := ParseStreamHello(b)
		if err != nil {
			return
		}
		if n < 1 || n > MaxSelftestBytes || checkToken(tok) != nil || !bytes.Equal(StreamHello(tok, n), b) {
			t.Fatalf("accepted %q: token %q, %d bytes", b, tok, n)
		}
	})
}
