package nccl

import (
	"maps"
	"reflect"
	"strings"
	"testing"
)

const sampleConf = "# NCCL settings\n" + // 1
	"NCCL_DEBUG=INFO\n" + // 2
	"NCCL_SOCKET_IFNAME==eth0,eth1\n" + // 3
	"\n" + // 4
	"just a line\n" + // 5
	"NCCL_DEBUG=WARN\n" + // 6
	" NCCL_P2P_LEVEL=NVL\n" + // 7
	"NCCL_NET_GDR_LEVEL= PHB\n" + // 8
	"NCCL_IB_TIMEOUT=22\r\n" + // 9
	"=x\n" + // 10
	"NCCL_TOPO_FILE=/etc/a=b.xml\n" + // 11
	"  # not a comment=yes" // 12, no newline at the end

func TestParseConf(t *testing.T) {
	m, err := ParseConf([]byte(sampleConf))
	want := map[string]string{
		"NCCL_DEBUG":         "INFO",
		"NCCL_SOCKET_IFNAME": "=eth0,eth1",
		" NCCL_P2P_LEVEL":    "NVL",
		"NCCL_NET_GDR_LEVEL": " PHB",
		"NCCL_IB_TIMEOUT":    "22\r",
		"NCCL_TOPO_FILE":     "/etc/a=b.xml",
		"  # not a comment":  "yes",
	}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("got  %q\nwant %q", m, want)
	}
	if !reflect.DeepEqual(m, ncclConf(sampleConf)) {
		t.Errorf("NCCL's reading differs: %q", ncclConf(sampleConf))
	}
	wantErrs := []string{
		`line 5: no '=' in "just a line": NCCL ignores the line`,
		"line 10: empty name: NCCL ignores the line",
		"line 6: NCCL_DEBUG set again: the value on line 2 wins",
		`line 7: name " NCCL_P2P_LEVEL" has surrounding spaces`,
		`line 8: NCCL_NET_GDR_LEVEL value " PHB" has surrounding spaces or a carriage return`,
		`line 9: NCCL_IB_TIMEOUT value "22\r" has surrounding spaces or a carriage return`,
		`line 12: name "  # not a comment" has surrounding spaces`,
	}
	if err == nil {
		t.Fatal("no error")
	}
	if got := strings.Split(err.Error(), "\n"); len(got) != len(wantErrs) {
		t.Errorf("errors:\n%s", err)
	}
	for _, w := range wantErrs {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("errors lack %q:\n%s", w, err)
		}
	}

	m, err = ParseConf([]byte("NCCL_DEBUG=INFO\nNCCL_IB_HCA==mlx5_0:1\n"))
	if err != nil || len(m) != 2 || m["NCCL_IB_HCA"] != "=mlx5_0:1" {
		t.Errorf("clean file: %q, %v", m, err)
	}
	long := "NCCL_TOPO_FILE=/" + strings.Repeat("x", 1100)
	if m, err := ParseConf([]byte(long)); err == nil || len(m["NCCL_TOPO_FILE"]) != maxConfField {
		t.Errorf("long value: %d bytes, %v", len(m["NCCL_TOPO_FILE"]), err)
	}
}

func TestEffective(t *testing.T) {
	user := Conf{Path: "/home/u/.nccl.conf", Data: []byte("NCCL_DEBUG=WARN\nNCCL_IB_HCA=mlx5\n")}
	etc := Conf{Path: "/etc/nccl.conf", Data: []byte("NCCL_DEBUG=TRACE\nNCCL_IB_HCA=mlx4\nNCCL_P2P_LEVEL=NVL\nbroken\n")}
	eff, probs := Effective(map[string]string{"NCCL_DEBUG": "INFO"}, user, etc)
	want := map[string]Setting{
		"NCCL_DEBUG":     {Value: "INFO", Source: "env"},
		"NCCL_IB_HCA":    {Value: "mlx5", Source: "/home/u/.nccl.conf:2"},
		"NCCL_P2P_LEVEL": {Value: "NVL", Source: "/etc/nccl.conf:3"},
	}
	if !reflect.DeepEqual(eff, want) {
		t.Errorf("got  %+v\nwant %+v", eff, want)
	}
	if len(probs) != 1 || probs[0].Error() != `/etc/nccl.conf: line 4: no '=' in "broken": NCCL ignores the line` {
		t.Errorf("problems %v", probs)
	}
	if got := UserEnv(map[string]string{"NCCL_DEBUG": "INFO"}, user, etc); !maps.Equal(got, map[string]string{
		"NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5", "NCCL_P2P_LEVEL": "NVL"}) {
		t.Errorf("UserEnv %q", got)
	}
}

// ncclConf transliterates NCCL's setEnvFile into a fresh environment:
// getline, '#' comments, split at the first '=', C-string names and
// values of at most 1023 bytes, setenv without overwrite.
func ncclConf(data string) map[string]string {
	env := map[string]string{}
	for len(data) > 0 {
		line := data
		if i := strings.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i+1], data[i+1:]
		} else {
			data = ""
		}
		if line[0] == '#' {
			continue
		}
		line = strings.TrimSuffix(line, "\n")
		if i := strings.IndexByte(line, 0); i >= 0 {
			line = line[:i]
		}
		s := strings.IndexByte(line, '=')
		if s < 0 {
			continue
		}
		name, value := line[:min(s, 1023)], line[s+1:]
		value = value[:min(len(value), 1023)]
		if _, set := env[name]; !set && name != "" {
			env[name] = value
		}
	}
	return env
}

func FuzzParseConf(f *testing.F) {
	f.Add([]byte(sampleConf))
	f.Add([]byte("NCCL_DEBUG=INFO\n"))
	f.Add([]byte("#x=1\nA=1\nA=2\n=3\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseConf(data)
		for k, v := range m {
			if k == "" || strings.ContainsAny(k, "=\n\x00") || strings.ContainsAny(v, "\n\x00") {
				t.Fatalf("bad entry %q=%q", k, v)
			}
		}
		if strings.IndexByte(string(data), 0) >= 0 {
			return // NCCL reads a NUL as the end of the line; ParseConf skips the line
		}
		if want := ncclConf(string(data)); !maps.Equal(m, want) {
			t.Fatalf("ParseConf %q, NCCL %q", m, want)
		}
		if err == nil {
			// A clean file reads the same after formatting it back.
			var b strings.Builder
			for k, v := range m {
				b.WriteString(k + "=" + v + "\n")
			}
			again, err := ParseConf([]byte(b.String()))
			if err != nil || !maps.Equal(again, m) {
				t.Fatalf("round trip of %q: %q, %v", m, again, err)
			}
		}
	})
}
