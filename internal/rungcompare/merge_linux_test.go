package rungcompare

import "testing"

func TestIsMerge(t *testing.T) {
	tests := []struct {
		m, a, b string
		want    bool
	}{
		{"out\nerr\n", "out\n", "err\n", true},
		{"err\nout\n", "out\n", "err\n", true},
		{"oeurtr\n\n", "out\n", "err\n", true},
		{"out\n", "out\n", "err\n", false},
		{"tuo\nerr\n", "out\n", "err\n", false},
		{"", "", "", true},
		{"x", "", "", false},
	}
	for _, tt := range tests {
		if got := isMerge(tt.m, tt.a, tt.b); got != tt.want {
			t.Errorf("isMerge(%q, %q, %q) = %v, want %v", tt.m, tt.a, tt.b, got, tt.want)
		}
	}
}
