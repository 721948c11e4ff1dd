package transport

import (
	"strings"
	"testing"
	"time"
)

// jobLine is scontrol show job -o's line for a job of the Slurm bed
// (22.05), with state, run time and time limit put in.
func jobLine(state, run, limit, reason string) string {
	return "JobId=3 JobName=interactive UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A Priority=4294901758 Nice=0 Account=(null) QOS=(null) " +
		"JobState=" + state + " Reason=" + reason + " Dependency=(null) Requeue=1 Restarts=0 BatchFlag=0 Reboot=0 ExitCode=0:0 " +
		"RunTime=" + run + " TimeLimit=" + limit + " TimeMin=N/A SubmitTime=2026-11-28T11:28:57 Deadline=N/A " +
		"Partition=bed AllocNode:Sid=login1:28467 NodeList=cn[1-3] BatchHost=cn1 NumNodes=3 NumCPUs=3 " +
		"Command=python train.py --epochs 3 WorkDir=/home/alice Power=\n"
}

func TestJobEnded(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       string // a part of the message; "" for none
	}{
		{"running", jobLine("RUNNING", "00:05:00", "01:00:00", "None"), ""},
		{"suspended", jobLine("SUSPENDED", "00:05:00", "UNLIMITED", "None"), ""},
		{"cancelled", jobLine("CANCELLED", "00:00:02", "UNLIMITED", "None"), "Slurm cancelled job 3 (scancel"},
		{"timeout", jobLine("TIMEOUT", "00:10:00", "00:10:00", "TimeLimit"), "it reached its time limit (TimeLimit=00:10:00)"},
		{"completing at the limit", jobLine("COMPLETING", "1-00:00:03", "1-00:00:00", "None"), "Slurm is ending job 3: it reached its time limit (TimeLimit=1-00:00:00)"},
		{"completing before the limit", jobLine("COMPLETING", "00:09:00", "00:10:00", "None"), "JobState=COMPLETING: cancelled, preempted or a node failed; sacct -j 3"},
		{"completing unlimited", jobLine("COMPLETING", "00:09:00", "UNLIMITED", "None"), "JobState=COMPLETING"},
		{"preempted", jobLine("PREEMPTED", "00:09:00", "UNLIMITED", "None"), "Slurm preempted job 3: a job of a higher priority (partition or QOS) took its nodes; submit it again, or to a partition that is not preempted"},
		{"node failed", jobLine("NODE_FAIL", "00:09:00", "UNLIMITED", "NodeDown"), "one of its nodes failed (JobState=NODE_FAIL; Reason=NodeDown)"},
		{"other state", jobLine("OUT_OF_MEMORY", "00:09:00", "UNLIMITED", "None"), "Slurm ended job 3 (JobState=OUT_OF_MEMORY)"},
		{"not a record", "slurm_load_jobs error: Invalid job id specified\n", ""},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := jobEnded("3", parseJobRecord([]byte(tc.line)))
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("jobEnded = %q, want one with %q", got, tc.want)
			}
		})
	}
}

func TestParseJobRecord(t *testing.T) {
	f := parseJobRecord([]byte(jobLine("CANCELLED", "00:00:02", "UNLIMITED", "None") + "JobId=4 JobState=RUNNING\n"))
	for k, want := range map[string]string{"JobId": "3", "JobState": "CANCELLED", "RunTime": "00:00:02", "TimeLimit": "UNLIMITED", "AllocNode:Sid": "login1:28467", "Command": "python", "WorkDir": "/home/alice", "Power": ""} {
		if got, ok := f[k]; !ok || got != want {
			t.Errorf("%s = %q (present %v), want %q", k, got, ok, want)
		}
	}
	if _, ok := f["--epochs"]; ok {
		t.Errorf("a word of Command's value read as a field")
	}
}

func TestParseSlurmDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"00:00:02", 2 * time.Second, true},
		{"01:02:03", time.Hour + 2*time.Minute + 3*time.Second, true},
		{"2-00:00:00", 48 * time.Hour, true},
		{"1-01:00:05", 25*time.Hour + 5*time.Second, true},
		{"10:00", 10 * time.Minute, true},
		{"UNLIMITED", 0, false},
		{"Partition_Limit", 0, false},
		{"NONE", 0, false},
		{"", 0, false},
		{"1-", 0, false},
		{"-1:00:00", 0, false},
		{"1:2:3:4", 0, false},
		{"+1:00", 0, false},
		{"00:-1", 0, false},
		{"x-00:00:01", 0, false},
	} {
		got, ok := parseSlurmDuration(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseSlurmDuration(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzJobRecord: any output of scontrol reads without panic, and a state
// the job still runs in is never reported as an end.
func FuzzJobRecord(f *testing.F) {
	f.Add(jobLine("CANCELLED", "00:00:02", "UNLIMITED", "None"))
	f.Add(jobLine("COMPLETING", "1-00:00:03", "1-00:00:00", "None"))
	f.Add(jobLine("RUNNING", "10:00", "5:00", "None"))
	f.Add("JobState= RunTime=- TimeLimit=::")
	f.Add("=== JobState==RUNNING")
	f.Fuzz(func(t *testing.T, out string) {
		fields := parseJobRecord([]byte(out))
		msg := jobEnded("9", fields)
		switch fields["JobState"] {
		case "", "RUNNING", "PENDING", "SUSPENDED":
			if msg != "" {
				t.Fatalf("state %q reported as an end: %q", fields["JobState"], msg)
			}
		default:
			if msg != "" && !strings.Contains(msg, "job 9") {
				t.Fatalf("state %q: message %q does not name the job", fields["JobState"], msg)
			}
		}
		for _, v := range fields {
			parseSlurmDuration(v)
		}
	})
}
