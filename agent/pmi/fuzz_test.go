package pmi

import (
	"bufio"
	"bytes"
	"slices"
	"strings"
	"testing"
)

func FuzzPMI1Parse(f *testing.F) {
	for _, s := range []string{
		"cmd=init pmi_version=1 pmi_subversion=1\n",
		"cmd=put kvsname=kvs_0 key=-allgather-shm-1-0 value=200DB7C1D4913947\n",
		"cmd=put kvsname=k key=1-0-key0 value=AG9iMQA -\n",
		"cmd=get kvsname=kvs_0 key=PMI_process_mapping\n",
		"cmd=initack pmiid=3\n",
		"mcmd=spawn\n", "endcmd\n",
		"=x == a=b=c  value=\n", "value=value=v a=b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		got := parsePMI1(line)
		for _, kv := range got {
			if kv.key == "" || strings.ContainsAny(kv.key, "= ") {
				t.Fatalf("%q: bad key %q", line, kv.key)
			}
		}
		// The first token that starts with value= takes the rest of the
		// line and ends the pairs; every other value is one token.
		body := strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		rest, hasValue := "", false
		for p := range len(body) {
			if (p == 0 || body[p-1] == ' ') && strings.HasPrefix(body[p:], "value=") {
				rest, hasValue = body[p+len("value="):], true
				break
			}
		}
		for i, kv := range got {
			last := i == len(got)-1
			if hasValue && last {
				if kv != (attr{"value", rest}) {
					t.Fatalf("%q: last pair %q, want value=%q", line, kv, rest)
				}
			} else if strings.Contains(kv.val, " ") {
				t.Fatalf("%q: value of %q has a space", line, kv.key)
			}
		}
		// Re-encoding the pairs parses back to the same pairs when no
		// value holds a space or line end (the PMI-1 client's own rule).
		var b strings.Builder
		for i, kv := range got {
			if strings.ContainsAny(kv.val, " \r\n") {
				return
			}
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(kv.key + "=" + kv.val)
		}
		if again := parsePMI1(b.String()); !slices.Equal(again, got) {
			t.Fatalf("%q: re-encoded %q parses to %q, want %q", line, b.String(), again, got)
		}
	})
}

func FuzzPMI2Parse(f *testing.F) {
	for _, s := range []string{
		"44    cmd=fullinit;pmirank=0;threaded=FALSE;\x00\x00\x00\x00\x00\x00",
		"50    cmd=info-getjobattr;key=PMI_process_mapping;d;\x00\x00\x00\x00",
		"49    cmd=info-getnodeattr;key=shmname;wait=TRUE;tnodea",
		"26    cmd=kvs-fence;key=x;;ab=c;",
		"    38cmd=kvs-put;key=k;value=addr;;of;;1;;;",
		"     5a=b;;",
		"99999 x",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The frame reader never panics and reads at most the header
		// plus the announced length.
		r := bufio.NewReader(bytes.NewReader(data))
		payload, quirk, err := readPMI2(r)
		if err == nil && len(payload)+pmi2HeaderLen > len(data) {
			t.Fatalf("read %d bytes from %d", len(payload)+pmi2HeaderLen, len(data))
		}
		for _, q := range []bool{false, true} {
			got := parsePMI2(data, q)
			for _, kv := range got {
				if kv.key == "" || strings.Contains(kv.key, "=") || strings.ContainsRune(kv.key+kv.val, 0) {
					t.Fatalf("%q: bad pair %q", data, kv)
				}
			}
			if len(got) == 0 {
				continue
			}
			// Encoding the pairs (escaped) parses back to the same
			// pairs, the first one read as the command.
			frame := encodePMI2(got[0].val, got[1:])
			if len(frame) > pmi2HeaderLen+maxMessage {
				continue
			}
			p, fq, err := readPMI2(bufio.NewReader(bytes.NewReader(frame)))
			if err != nil || fq {
				t.Fatalf("%q: own frame %q: %v quirk=%v", data, frame, err, fq)
			}
			want := append(attrs{{"cmd", got[0].val}}, got[1:]...)
			if again := parsePMI2(p, false); !slices.Equal(again, want) {
				t.Fatalf("%q: round trip %q -> %q, want %q", data, frame, again, want)
			}
		}
		if err == nil {
			parsePMI2(payload, quirk)
		}
		// Any NUL-free string survives escaping as a value.
		v := strings.ReplaceAll(string(data), "\x00", "")
		frame := encodePMI2("kvs-get-response", attrs{{"value", v}})
		if len(frame) <= pmi2HeaderLen+maxMessage {
			p, _, err := readPMI2(bufio.NewReader(bytes.NewReader(frame)))
			if err != nil {
				t.Fatal(err)
			}
			if got := parsePMI2(p, false); len(got) != 2 || got[1].val != v {
				t.Fatalf("escape round trip of %q: %q", v, got)
			}
		}
	})
}
