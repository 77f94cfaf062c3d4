package agent

import "testing"

func TestMatchPattern(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p, id string
		want  bool
	}{
		{"fs::read", "fs::read", true},
		{"fs::read", "fs::readx", false},
		{"fs::read", "xfs::read", false},
		{"fs::*", "fs::read", true},
		{"fs::*", "fs::", true},
		{"fs::*", "fsx::read", false},
		{"*::read", "fs::read", true},
		{"*::read", "fs::read::x", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "acb", false},
		{"a*a", "a", false},
		{"a*a", "aa", true},
		{"**", "anything", true},
	}
	for _, tt := range tests {
		if got := MatchPattern(tt.p, tt.id); got != tt.want {
			t.Errorf("MatchPattern(%q, %q) = %v, want %v", tt.p, tt.id, got, tt.want)
		}
	}
}

func TestValidatePattern(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"*", "", "a b", "x\ny"} {
		if ValidatePattern(p) == nil {
			t.Errorf("ValidatePattern(%q) accepted", p)
		}
	}
	for _, p := range []string{"fs::*", "shell::exec", "*::read"} {
		if err := ValidatePattern(p); err != nil {
			t.Errorf("ValidatePattern(%q) = %v", p, err)
		}
	}
	if !IsHumanOnly("approval::resolve") || IsHumanOnly("approval::list_pending") {
		t.Error("IsHumanOnly is wrong")
	}
}

func FuzzMatchPattern(f *testing.F) {
	f.Add("a*b", "axb")
	f.Add("*", "")
	f.Fuzz(func(t *testing.T, p, id string) {
		got := MatchPattern(p, id)
		if p == id && !got {
			t.Fatalf("%q does not match itself", p)
		}
	})
}
