package plan

import (
	"reflect"
	"strings"
	"testing"
)

func TestRankRanges(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{[]int{0}, "0"},
		{[]int{0, 1, 2, 3}, "0-3"},
		{[]int{3, 1, 0, 2}, "0-3"},
		{[]int{0, 2, 4}, "0,2,4"},
		{[]int{0, 1, 3, 4, 5, 9}, "0-1,3-5,9"},
		{[]int{7, 7}, "7"},
		{nil, ""},
	} {
		if got := Ranges(tc.in); got != tc.want {
			t.Errorf("Ranges(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestParseRankSet(t *testing.T) {
	tests := []struct {
		in   string
		want []int // the members among 0..9
	}{
		{"0", []int{0}},
		{"3", []int{3}},
		{"0,2,4-7", []int{0, 2, 4, 5, 6, 7}},
		{" 1 , 3-4 ", []int{1, 3, 4}},
		{"5-5", []int{5}},
		{"8-100", []int{8, 9}},
		{"2,2,1-2", []int{1, 2}},
		{"12", nil},
	}
	for _, tt := range tests {
		rs, err := ParseRankSet(tt.in)
		if err != nil {
			t.Errorf("ParseRankSet(%q): %v", tt.in, err)
			continue
		}
		if rs.All() {
			t.Errorf("ParseRankSet(%q).All() = true", tt.in)
		}
		var got []int
		for r := range 10 {
			if rs.Has(r) {
				got = append(got, r)
			}
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseRankSet(%q) has %v of 0..9, want %v", tt.in, got, tt.want)
		}
		if rs.Has(-1) {
			t.Errorf("ParseRankSet(%q).Has(-1)", tt.in)
		}
	}
}

func TestParseRankSetErrors(t *testing.T) {
	tests := []struct{ in, wantMsg string }{
		{"", `bad rank ""`},
		{"a", `bad rank "a"`},
		{"-1", `bad rank "-1"`},
		{"1,", `bad rank ""`},
		{"1,,2", `bad rank ""`},
		{"3-1", `bad rank range "3-1"`},
		{"1-", `bad rank range "1-"`},
		{"1-2-3", `bad rank range "1-2-3"`},
		{"1-x", `bad rank range "1-x"`},
		{"1.5", `bad rank "1.5"`},
		{"99999999999999999999", `bad rank`},
	}
	for _, tt := range tests {
		_, err := ParseRankSet(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.wantMsg) {
			t.Errorf("ParseRankSet(%q) = %v, want an error containing %q", tt.in, err, tt.wantMsg)
		}
	}
}

func TestRankSetZeroIsAll(t *testing.T) {
	var rs RankSet
	if !rs.All() {
		t.Error("zero RankSet: All() = false")
	}
	for _, r := range []int{0, 1, 1000} {
		if !rs.Has(r) {
			t.Errorf("zero RankSet: Has(%d) = false", r)
		}
	}
}
