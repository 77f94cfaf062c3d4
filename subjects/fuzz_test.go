package subjects

import (
	"strings"
	"testing"
)

func noWildcardOrEmpty(t *testing.T, subject string) {
	t.Helper()
	for _, tok := range strings.Split(subject, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, "*> \t\r\n") {
			t.Fatalf("subject %q has an empty, wildcard or whitespace token", subject)
		}
	}
}

func FuzzFunctionSubject(f *testing.F) {
	for _, s := range []string{"run::start", "a.b::c", "fs::*", "::", "a::::b", "é", "x~41", "a:::b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		subj, err := FunctionSubject(id)
		if err != nil {
			return
		}
		noWildcardOrEmpty(t, subj)
		back, err := FunctionID(subj)
		if err != nil {
			t.Fatalf("FunctionID(%q) of valid id %q: %v", subj, id, err)
		}
		if back != id {
			t.Fatalf("round trip %q → %q → %q", id, subj, back)
		}
	})
}

func FuzzFunctionID(f *testing.F) {
	for _, s := range []string{"iii.fn.run.start", "iii.fn.a~2Eb", "iii.fn.>", "iii.fn..", "iii.fn.a~zz", "iii.fn.a~3A~3Ab", "iii.fn.a~3A.b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subj string) {
		id, err := FunctionID(subj)
		if err != nil {
			return
		}
		again, err := FunctionSubject(id)
		if err != nil || again != subj {
			t.Fatalf("decode of %q gave %q which encodes to %q (%v): not canonical", subj, id, again, err)
		}
	})
}

func FuzzStateKey(f *testing.F) {
	for _, s := range []string{"a", "a/b", "a.b", "x=y/z", "/", "é/*"} {
		f.Add("scope", s)
	}
	f.Fuzz(func(t *testing.T, scope, key string) {
		kv, err := StateKVKey(scope, key)
		if err != nil {
			return
		}
		noWildcardOrEmpty(t, kv)
		for i := 0; i < len(kv); i++ {
			c := kv[i]
			if !(plain(c) || c == '.' || c == '=') {
				t.Fatalf("KV key %q has byte %q outside the KV alphabet", kv, c)
			}
		}
		s2, k2, err := SplitStateKVKey(kv)
		if err != nil || s2 != scope || k2 != key {
			t.Fatalf("round trip (%q,%q) → %q → (%q,%q,%v)", scope, key, kv, s2, k2, err)
		}
	})
}

// SkillKey is injective and SkillID reverses it.
func FuzzSkillKey(f *testing.F) {
	f.Add("sandbox", "fs::read")
	f.Add("w", "a/b::c")
	f.Add("bad.worker", "x")
	f.Fuzz(func(t *testing.T, worker, fn string) {
		key, err := SkillKey(worker, fn)
		if err != nil {
			return
		}
		if strings.ContainsAny(key, "*> ") {
			t.Fatalf("key %q has a wildcard or space", key)
		}
		w, id, err := SkillID(key)
		if err != nil || w != worker || id != fn {
			t.Fatalf("SkillID(%q) = %q, %q, %v; want %q, %q", key, w, id, err, worker, fn)
		}
	})
}
