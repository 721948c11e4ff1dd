package health

import (
	"fmt"
	"strconv"
	"strings"
)

// GPUQuery are the nvidia-smi arguments whose output ParseGPUs reads:
// the GPUs, their ECC counters and pending page retirements.
var GPUQuery = []string{
	"--query-gpu=index,uuid,pci.bus_id,name,memory.total,ecc.mode.current,ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total,retired_pages.pending,retired_pages.double_bit.count",
	"--format=csv,noheader,nounits",
}

// AppsQuery are the nvidia-smi arguments whose output ParseApps reads:
// every process with a compute context on a GPU.
var AppsQuery = []string{"--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv,noheader"}

// RemapQuery are the nvidia-smi arguments whose output ParseRemapped
// reads: each GPU's row-remapping state (A100 and later).
var RemapQuery = []string{
	"--query-remapped-rows=gpu_bus_id,gpu_uuid,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure",
	"--format=csv,noheader",
}

// Unknown is a counter nvidia-smi did not report ("[N/A]", "[Not
// Supported]"): ECC off, or a field this GPU does not have.
const Unknown = -1

// GPU is one line of GPUQuery's output.
type GPU struct {
	Index int
	UUID  string
	BusID string // as nvidia-smi prints it
	Name  string
	// ECCVolatile and ECCAggregate are the uncorrectable ECC errors since
	// the driver loaded and over the GPU's life; Unknown when not
	// reported.
	ECCVolatile, ECCAggregate int
	// RetiredPending is "Yes", "No" or "" (not reported: GPUs from A100
	// on remap rows instead).
	RetiredPending string
}

// Label names g for a person: "GPU 3 (GPU-1a5e…, 00000000:4E:00.0)".
func (g GPU) Label() string { return fmt.Sprintf("GPU %d (%s, %s)", g.Index, g.UUID, g.BusID) }

// App is one line of AppsQuery's output.
type App struct {
	GPUUUID string
	PID     int
	Name    string
	Memory  string // "1634 MiB", or "" when not reported
}

// Remap is one line of RemapQuery's output.
type Remap struct {
	BusID, UUID                string
	Correctable, Uncorrectable int // Unknown when not reported
	Pending, Failure           bool
}

// fields splits one nvidia-smi CSV line, trimmed. nvidia-smi does not
// quote: a comma in a free-text field (a GPU or process name) splits it,
// so callers join the fields around it back.
func fields(line string) []string {
	f := strings.Split(line, ",")
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
	}
	return f
}

// lines are the non-empty lines of out, with their 1-based numbers.
func lines(out []byte) (ls []string, nums []int) {
	for i, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			ls, nums = append(ls, l), append(nums, i+1)
		}
	}
	return ls, nums
}

// notReported says whether nvidia-smi printed no value for a field.
func notReported(s string) bool {
	return s == "" || strings.HasPrefix(s, "[") || s == "N/A"
}

// counter reads a count, Unknown when not reported.
func counter(s string) (int, error) {
	if notReported(s) {
		return Unknown, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad count %q", s)
	}
	return n, nil
}

// yesNo reads "Yes" or "No"; not reported is "".
func yesNo(s string) (string, error) {
	switch {
	case notReported(s):
		return "", nil
	case s == "Yes" || s == "No":
		return s, nil
	}
	return "", fmt.Errorf("want Yes or No, got %q", s)
}

// ParseGPUs reads GPUQuery's output, one GPU per line.
func ParseGPUs(out []byte) ([]GPU, error) {
	const n = 10
	ls, nums := lines(out)
	gpus := make([]GPU, 0, len(ls))
	for k, line := range ls {
		f := fields(line)
		if len(f) < n {
			return nil, fmt.Errorf("nvidia-smi --query-gpu:%d: want %d fields, got %d: %q", nums[k], n, len(f), clip(line))
		}
		extra := len(f) - n // commas in the name
		name := strings.Join(f[3:4+extra], ", ")
		f = append(f[:3:3], append([]string{name}, f[4+extra:]...)...)
		bad := func(err error) error { return fmt.Errorf("nvidia-smi --query-gpu:%d: %w", nums[k], err) }
		idx, err := strconv.Atoi(f[0])
		if err != nil || idx < 0 {
			return nil, bad(fmt.Errorf("bad index %q", f[0]))
		}
		g := GPU{Index: idx, UUID: f[1], BusID: f[2], Name: f[3]}
		if g.ECCVolatile, err = counter(f[6]); err != nil {
			return nil, bad(err)
		}
		if g.ECCAggregate, err = counter(f[7]); err != nil {
			return nil, bad(err)
		}
		if g.RetiredPending, err = yesNo(f[8]); err != nil {
			return nil, bad(err)
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}

// ParseApps reads AppsQuery's output; no line means no process.
func ParseApps(out []byte) ([]App, error) {
	ls, nums := lines(out)
	apps := make([]App, 0, len(ls))
	for k, line := range ls {
		f := fields(line)
		if len(f) < 4 {
			return nil, fmt.Errorf("nvidia-smi --query-compute-apps:%d: want 4 fields, got %d: %q", nums[k], len(f), clip(line))
		}
		pid, err := strconv.Atoi(f[1])
		if err != nil || pid < 0 {
			return nil, fmt.Errorf("nvidia-smi --query-compute-apps:%d: bad pid %q", nums[k], f[1])
		}
		mem := f[len(f)-1]
		if notReported(mem) {
			mem = ""
		}
		apps = append(apps, App{GPUUUID: f[0], PID: pid, Name: strings.Join(f[2:len(f)-1], ", "), Memory: mem})
	}
	return apps, nil
}

// ParseRemapped reads RemapQuery's output, one GPU per line.
func ParseRemapped(out []byte) ([]Remap, error) {
	ls, nums := lines(out)
	rows := make([]Remap, 0, len(ls))
	for k, line := range ls {
		f := fields(line)
		if len(f) != 6 {
			return nil, fmt.Errorf("nvidia-smi --query-remapped-rows:%d: want 6 fields, got %d: %q", nums[k], len(f), clip(line))
		}
		bad := func(err error) error { return fmt.Errorf("nvidia-smi --query-remapped-rows:%d: %w", nums[k], err) }
		r := Remap{BusID: f[0], UUID: f[1]}
		var err error
		if r.Correctable, err = counter(f[2]); err != nil {
			return nil, bad(err)
		}
		if r.Uncorrectable, err = counter(f[3]); err != nil {
			return nil, bad(err)
		}
		p, err := yesNo(f[4])
		if err != nil {
			return nil, bad(err)
		}
		fl, err := yesNo(f[5])
		if err != nil {
			return nil, bad(err)
		}
		r.Pending, r.Failure = p == "Yes", fl == "Yes"
		rows = append(rows, r)
	}
	return rows, nil
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
