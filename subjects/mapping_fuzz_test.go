package subjects

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// The one-token ids: each mapping takes exactly what ValidateID takes and
// appends it to its prefix unchanged.
func FuzzIDSubjects(f *testing.F) {
	for _, s := range []string{"orders", "a.b", "", "x>", "*", "ok_1-2", "é", strings.Repeat("x", MaxIDLen+1), "$SYS", "_INBOX"} {
		f.Add(s)
	}
	mappings := []struct {
		prefix string
		fn     func(string) (string, error)
	}{
		{QueueSubjectPrefix, QueueSubject},
		{DLQSubjectPrefix, DLQSubject},
		{TopicSubjectPrefix, TopicSubject},
		{PubSubSubjectPrefix, PubSubSubject},
		{ChannelSubjectPrefix, ChannelSubject},
		{StepHostSubjectPrefix, StepHostSubject},
	}
	f.Fuzz(func(t *testing.T, id string) {
		valid := ValidateID("id", id) == nil
		for _, m := range mappings {
			subj, err := m.fn(id)
			if (err == nil) != valid {
				t.Fatalf("%s%q: err %v, ValidateID valid %v", m.prefix, id, err, valid)
			}
			if err != nil {
				continue
			}
			if subj != m.prefix+id || strings.Count(subj, ".") != strings.Count(m.prefix, ".") {
				t.Fatalf("%q maps onto %q, want one token after %q", id, subj, m.prefix)
			}
			noWildcardOrEmpty(t, subj)
		}
	})
}

// ValidateSessionID and SessionIDSchema (the function schemas' copy of its
// rule) agree; a session's subjects are one of its home's streams'
// subjects and never another home's.
func FuzzSessionID(f *testing.F) {
	for _, s := range []string{"s1", "eu.s1", "eu.", ".s1", "a.b.c", "eu.s*", strings.Repeat("r", 65) + ".s", strings.Repeat("x", MaxIDLen+1), "é.s"} {
		f.Add(s)
	}
	var schema struct {
		MaxLength int    `json:"maxLength"`
		Pattern   string `json:"pattern"`
	}
	if err := json.Unmarshal([]byte(SessionIDSchema), &schema); err != nil {
		f.Fatal(err)
	}
	pattern := regexp.MustCompile(schema.Pattern)
	f.Fuzz(func(t *testing.T, sid string) {
		err := ValidateSessionID(sid)
		bySchema := len(sid) <= schema.MaxLength && pattern.MatchString(sid)
		if (err == nil) != bySchema {
			t.Fatalf("ValidateSessionID(%q) = %v, but the schema says valid=%v", sid, err, bySchema)
		}
		region := SessionRegion(sid)
		for _, m := range []struct {
			prefix string
			fn     func(string) (string, error)
		}{
			{StepSubjectPrefix, StepSubject},
			{EventSubjectPrefix, EventSubject},
			{SessionEntrySubjectPrefix, SessionEntrySubject},
		} {
			subj, serr := m.fn(sid)
			if (serr == nil) != (err == nil) {
				t.Fatalf("%s%q: %v, ValidateSessionID: %v", m.prefix, sid, serr, err)
			}
			if serr != nil {
				continue
			}
			noWildcardOrEmpty(t, subj)
			if !subjectMatches(SessionSubjects(m.prefix, region), subj) {
				t.Fatalf("%q is not under its home's filter %q", subj, SessionSubjects(m.prefix, region))
			}
			for _, other := range []string{"", "eu", region + "x"} {
				if other != region && subjectMatches(SessionSubjects(m.prefix, other), subj) {
					t.Fatalf("%q (home %q) is under region %q's filter", subj, region, other)
				}
			}
		}
		if err == nil && strings.ContainsAny(SessionStream(EventStream, sid)+SessionBucket(StateBucket, sid), ".*> ") {
			t.Fatalf("session %q's stream or bucket name has an illegal character", sid)
		}
	})
}

// subjectMatches reports whether filter (tokens, '*', a trailing '>')
// matches subject.
func subjectMatches(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, f := range ft {
		if f == ">" {
			return len(st) > i
		}
		if i >= len(st) || (f != "*" && f != st[i]) {
			return false
		}
	}
	return len(ft) == len(st)
}

// ConsumerName is injective and yields a legal consumer name.
func FuzzConsumerNameMapping(f *testing.F) {
	f.Add("a::b", "a~~b")
	f.Add("a.b", "a~2Eb")
	f.Add("a:::b", "a:::b")
	f.Add("é", "x")
	f.Fuzz(func(t *testing.T, id1, id2 string) {
		n1, err1 := ConsumerName("p", id1)
		n2, err2 := ConsumerName("p", id2)
		if (err1 == nil) != (ValidateFunctionID(id1) == nil) {
			t.Fatalf("ConsumerName(%q): %v", id1, err1)
		}
		for _, n := range []string{n1, n2} {
			if strings.ContainsAny(n, " \t\r\n.*>/\\") {
				t.Fatalf("illegal consumer name %q", n)
			}
		}
		if err1 == nil && err2 == nil && n1 == n2 && id1 != id2 {
			t.Fatalf("%q and %q share consumer %q", id1, id2, n1)
		}
	})
}

// HookSubject is FunctionSubject's tokens under the hook prefix.
func FuzzHookSubject(f *testing.F) {
	for _, s := range []string{"agent::before_function_call", "a.b", "*", "::", "a:::b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, topic string) {
		subj, err := HookSubject(topic)
		fn, ferr := FunctionSubject(topic)
		if (err == nil) != (ferr == nil) {
			t.Fatalf("HookSubject(%q) = %v, FunctionSubject %v", topic, err, ferr)
		}
		if err != nil {
			return
		}
		noWildcardOrEmpty(t, subj)
		id, err := FunctionID(FunctionPrefix + strings.TrimPrefix(subj, HookSubjectPrefix))
		if err != nil || id != topic || subj != HookSubjectPrefix+strings.TrimPrefix(fn, FunctionPrefix) {
			t.Fatalf("HookSubject(%q) = %q does not map back (%q, %v)", topic, subj, id, err)
		}
	})
}

// StatePrefixFilter matches the keys under the prefix, and only them.
func FuzzStatePrefixFilter(f *testing.F) {
	for _, s := range []string{"", "a", "a/", "a/b", "a.b", "/", "a//", "*", ">"} {
		f.Add("s", s, "k")
	}
	f.Fuzz(func(t *testing.T, scope, prefix, rest string) {
		filter, err := StatePrefixFilter(scope, prefix)
		if err != nil {
			return
		}
		if !strings.HasSuffix(filter, ".>") || strings.ContainsAny(strings.TrimSuffix(filter, ".>"), "*> ") {
			t.Fatalf("filter %q", filter)
		}
		p := strings.TrimSuffix(prefix, "/")
		under, other := rest, rest
		if p != "" {
			under, other = p+"/"+rest, p+rest
		}
		if kv, err := StateKVKey(scope, under); err == nil && !subjectMatches(filter, kv) {
			t.Fatalf("key %q (%q) is not under filter %q", under, kv, filter)
		}
		if kv, err := StateKVKey(scope, other); err == nil && p != "" && !strings.HasPrefix(rest, "/") && subjectMatches(filter, kv) {
			t.Fatalf("key %q (%q) is under filter %q of prefix %q", other, kv, filter, prefix)
		}
	})
}

// The decoders take only what their encoders make: decode → encode gives
// the input back, so two stored names never name the same thing.
func FuzzKVDecoders(f *testing.F) {
	for _, s := range []string{"s.a", "s.a=2Fb", "s.a.b", "s1.call=3Ax", "eu.s1.c", "w.fs=3A=3Aread", "w=2Fa.b", "=", "s..a", "s.a=2f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, kv string) {
		if key, err := KeyFromKV(kv); err == nil {
			if again, err := KVKey(key); err != nil || again != kv {
				t.Fatalf("KeyFromKV(%q) = %q, which encodes to %q (%v)", kv, key, again, err)
			}
		}
		if scope, key, err := SplitStateKVKey(kv); err == nil {
			if again, err := StateKVKey(scope, key); err != nil || again != kv {
				t.Fatalf("SplitStateKVKey(%q) = %q, %q, which encodes to %q (%v)", kv, scope, key, again, err)
			}
		}
		if sid, call, err := SplitApprovalKey(kv); err == nil {
			if again, err := ApprovalKey(sid, call); err != nil || again != kv {
				t.Fatalf("SplitApprovalKey(%q) = %q, %q, which encodes to %q (%v)", kv, sid, call, again, err)
			}
		}
		if worker, fn, err := SkillID(kv); err == nil {
			if again, err := SkillKey(worker, fn); err != nil || again != kv {
				t.Fatalf("SkillID(%q) = %q, %q, which encodes to %q (%v)", kv, worker, fn, again, err)
			}
		}
	})
}

// RegionalCopy names a region's copy of a stream or a KV bucket's stream
// as RegionalStream and RegionalBucket do.
func FuzzRegionalNames(f *testing.F) {
	f.Add("III_EVENTS", "eu")
	f.Add("KV_iii-turn-state", "us-east")
	f.Add("KV_", "")
	f.Fuzz(func(t *testing.T, stream, region string) {
		if ValidateRegion(region) != nil && region != "" {
			return
		}
		got := RegionalCopy(stream, region)
		if region == "" && got != stream {
			t.Fatalf("RegionalCopy(%q, \"\") = %q", stream, got)
		}
		if b, ok := strings.CutPrefix(stream, "KV_"); ok {
			if got != "KV_"+RegionalBucket(b, region) {
				t.Fatalf("RegionalCopy(%q, %q) = %q", stream, region, got)
			}
		} else if got != RegionalStream(stream, region) {
			t.Fatalf("RegionalCopy(%q, %q) = %q", stream, region, got)
		}
	})
}
