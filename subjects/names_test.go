package subjects

import (
	"strings"
	"testing"
)

func TestApprovalKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		sid, call string
		want      string
		wantErr   bool
	}{
		{"s1", "toolu_01ABC", "s1.toolu_01ABC", false},
		{"s1", "call:x", "s1.call=3Ax", false},
		{"s1", "a/b", "", true},
		{"s.1", "c", "s.1.c", false}, // session "1" homed in region "s"
		{"eu.s1", "call:x", "eu.s1.call=3Ax", false},
		{"a.b.c", "c", "", true},
		{"s1", "", "", true},
		{"", "c", "", true},
	}
	for _, tt := range tests {
		got, err := ApprovalKey(tt.sid, tt.call)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ApprovalKey(%q, %q) = %q, %v; want %q, err %v", tt.sid, tt.call, got, err, tt.want, tt.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		sid, call, err := SplitApprovalKey(got)
		if err != nil || sid != tt.sid || call != tt.call {
			t.Errorf("SplitApprovalKey(%q) = %q, %q, %v", got, sid, call, err)
		}
	}
	if f, err := ApprovalSessionFilter("s1"); err != nil || f != "s1.>" {
		t.Errorf("ApprovalSessionFilter = %q, %v", f, err)
	}
	if _, err := ApprovalSessionFilter("*"); err == nil {
		t.Error("ApprovalSessionFilter(*) accepted")
	}
}

func TestHookSubject(t *testing.T) {
	t.Parallel()
	got, err := HookSubject("agent::before_function_call")
	if err != nil || got != "iii.hook.agent.before_function_call" {
		t.Fatalf("HookSubject = %q, %v", got, err)
	}
	if _, err := HookSubject(""); err == nil {
		t.Fatal("HookSubject of an empty topic accepted")
	}
}

func FuzzApprovalKey(f *testing.F) {
	for _, s := range []string{"toolu_1", "call:x", "a/b", "é", "=41"} {
		f.Add("s1", s)
	}
	f.Fuzz(func(t *testing.T, sid, call string) {
		k, err := ApprovalKey(sid, call)
		if err != nil {
			return
		}
		noWildcardOrEmpty(t, k)
		s2, c2, err := SplitApprovalKey(k)
		if err != nil || s2 != sid || c2 != call {
			t.Fatalf("round trip (%q,%q) → %q → (%q,%q,%v)", sid, call, k, s2, c2, err)
		}
	})
}

func TestStepHostSubject(t *testing.T) {
	tests := []struct {
		id, want string
		ok       bool
	}{
		{"Abc_09-x", "iii.turn.host.Abc_09-x", true},
		{"", "", false},
		{"a.b", "", false},
		{"a*", "", false},
		{"a>", "", false},
		{"a b", "", false},
	}
	for _, tt := range tests {
		got, err := StepHostSubject(tt.id)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("StepHostSubject(%q) = %q, %v", tt.id, got, err)
		}
	}
}

func FuzzStepHostSubject(f *testing.F) {
	for _, s := range []string{"abc", "a.b", "", "x>", "ok_1-2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		subj, err := StepHostSubject(id)
		if err != nil {
			return
		}
		if subj != StepHostSubjectPrefix+id || strings.ContainsAny(id, ".*> \t\r\n") {
			t.Fatalf("StepHostSubject(%q) = %q", id, subj)
		}
	})
}
