package subjects

import (
	"errors"
	"strings"
	"testing"
)

func TestFunctionSubject(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id, subject string
		err         error
	}{
		{id: "run::start", subject: "iii.fn.run.start"},
		{id: "provider::anthropic::stream", subject: "iii.fn.provider.anthropic.stream"},
		{id: "policy::check_permissions", subject: "iii.fn.policy.check_permissions"},
		{id: "a.b::c", subject: "iii.fn.a~2Eb.c"},
		{id: "fs::*", subject: "iii.fn.fs.~2A"},
		{id: "fs::>", subject: "iii.fn.fs.~3E"},
		{id: "x~y", subject: "iii.fn.x~7Ey"},
		{id: "a:b", subject: "iii.fn.a~3Ab"},
		{id: "é", subject: "iii.fn.~C3~A9"},
		{id: "", err: ErrInvalidFunctionID},
		{id: "a::::b", err: ErrInvalidFunctionID},
		{id: "::a", err: ErrInvalidFunctionID},
		{id: "a::", err: ErrInvalidFunctionID},
		{id: "a b", err: ErrInvalidFunctionID},
		{id: "a\nb", err: ErrInvalidFunctionID},
		{id: "a\x00b", err: ErrInvalidFunctionID},
		{id: "\xff", err: ErrInvalidFunctionID},
		{id: strings.Repeat("a", MaxFunctionIDLen+1), err: ErrInvalidFunctionID},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			got, err := FunctionSubject(tt.id)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("FunctionSubject(%q) err = %v, want %v", tt.id, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.subject {
				t.Fatalf("FunctionSubject(%q) = %q, %v; want %q", tt.id, got, err, tt.subject)
			}
			back, err := FunctionID(got)
			if err != nil || back != tt.id {
				t.Fatalf("FunctionID(%q) = %q, %v; want %q", got, back, err, tt.id)
			}
		})
	}
}

func TestFunctionIDRefuses(t *testing.T) {
	t.Parallel()
	for _, subj := range []string{
		"", "iii.fn.", "iii.fn", "other.run.start", "iii.fn.run..start", "iii.fn.run.*", "iii.fn.>",
		"iii.fn.a~2e", "iii.fn.a~41", "iii.fn.a~", "iii.fn.a~4", "iii.fn.a b", "iii.fn.run.",
		// Escaped ':' that rebuild a "::": "a::b" is "iii.fn.a.b" and
		// "a:::b" is "iii.fn.a.~3Ab", nothing else.
		"iii.fn.a~3A~3Ab", "iii.fn.a~3A.b", "iii.fn.a.b~3A~3Ac", "iii.fn.~3A~3A",
	} {
		if id, err := FunctionID(subj); err == nil {
			t.Errorf("FunctionID(%q) = %q, want error", subj, id)
		}
	}
}

func TestValidateID(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"s1", "abc_DEF-123", strings.Repeat("x", MaxIDLen)} {
		if err := ValidateID("session_id", ok); err != nil {
			t.Errorf("ValidateID(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a.b", "a*", "a>", "a b", "a\tb", "a/b", "é", strings.Repeat("x", MaxIDLen+1)} {
		if err := ValidateID("session_id", bad); !errors.Is(err, ErrInvalidID) {
			t.Errorf("ValidateID(%q) = %v, want ErrInvalidID", bad, err)
		}
	}
}

func TestStateKeys(t *testing.T) {
	t.Parallel()
	tests := []struct{ scope, key, kv string }{
		{"sessions", "abc", "sessions.abc"},
		{"sessions", "a/b/c", "sessions.a.b.c"},
		{"s", "a.b", "s.a=2Eb"},
		{"s", "*", "s.=2A"},
		{"s", "x=y", "s.x=3Dy"},
	}
	for _, tt := range tests {
		got, err := StateKVKey(tt.scope, tt.key)
		if err != nil || got != tt.kv {
			t.Fatalf("StateKVKey(%q,%q) = %q, %v; want %q", tt.scope, tt.key, got, err, tt.kv)
		}
		scope, key, err := SplitStateKVKey(got)
		if err != nil || scope != tt.scope || key != tt.key {
			t.Fatalf("SplitStateKVKey(%q) = %q,%q,%v", got, scope, key, err)
		}
	}
	for _, bad := range []string{"", "/a", "a/", "a//b", "a\nb"} {
		if _, err := StateKVKey("s", bad); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("StateKVKey(s,%q) err = %v, want ErrInvalidKey", bad, err)
		}
	}
	if _, err := StateKVKey("a.b", "k"); !errors.Is(err, ErrInvalidID) {
		t.Errorf("scope with '.' accepted")
	}
	f, err := StatePrefixFilter("s", "a/b/")
	if err != nil || f != "s.a.b.>" {
		t.Fatalf("StatePrefixFilter = %q, %v", f, err)
	}
}

// KeyFromKV and the splitters built on it take only the KV key the
// decoded key maps onto: an escaped '/' ("=2F") would name the key of
// another KV key ("a=2Fb" and "a.b" both "a/b").
func TestKVKeyDecodeRefusesNonCanonical(t *testing.T) {
	t.Parallel()
	for _, kv := range []string{"a=2Fb", "=2F", "a.b=2Fc", "a=2f", "a=41", "a..b", ".a", "a."} {
		if k, err := KeyFromKV(kv); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("KeyFromKV(%q) = %q, %v; want ErrInvalidKey", kv, k, err)
		}
	}
	if sc, k, err := SplitStateKVKey("s.a=2Fb"); err == nil {
		t.Errorf("SplitStateKVKey(s.a=2Fb) = %q, %q: the key of s.a.b", sc, k)
	}
	if sid, call, err := SplitApprovalKey("s1.a=2Fb"); err == nil {
		t.Errorf("SplitApprovalKey(s1.a=2Fb) = %q, %q: a call id ApprovalKey refuses", sid, call)
	}
	if w, fn, err := SkillID("w=2Fa.b"); err == nil {
		t.Errorf("SkillID(w=2Fa.b) = %q, %q: the skill of w.a.b", w, fn)
	}
}

func TestConsumerNameInjective(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, id := range []string{"a::b", "a~2Eb", "a.b", "a_b", "a::b::c", "a::b_c", "a~~b"} {
		n, err := ConsumerName("st", id)
		if err != nil {
			t.Fatal(err)
		}
		if strings.ContainsAny(n, ".*> \t") {
			t.Fatalf("consumer name %q has an illegal character", n)
		}
		if prev, ok := seen[n]; ok {
			t.Fatalf("ConsumerName collision: %q and %q → %q", prev, id, n)
		}
		seen[n] = id
	}
}
