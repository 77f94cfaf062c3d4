package approval

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

var codecs = []wire.Codec{wire.JSON, wire.Msgpack}

// FuzzResolveRequest decodes arbitrary bytes as a resolve request with both
// codecs: no panic, every refusal is invalid_payload, and a request that
// validates always has an approval key that splits back into its ids.
func FuzzResolveRequest(f *testing.F) {
	for _, s := range []string{
		`{"session_id":"s1","function_call_id":"toolu_01","decision":"allow"}`,
		`{"session_id":"s1","function_call_id":"a.b","decision":"deny","reason":"x"}`,
		`{"session_id":"eu.s1","function_call_id":"toolu_01","decision":"allow"}`,
		`{"session_id":"eu.s1.x","function_call_id":"toolu_01","decision":"allow"}`,
		`{"session_id":"s1","function_call_id":"ü:=~%","decision":"aborted","args_hash":"` + goodHash + `"}`,
		`{"session_id":"","function_call_id":"","decision":""}`,
		`{"decision":5}`, `null`, `[]`, ``, "\xff",
	} {
		f.Add([]byte(s))
	}
	if b, err := wire.Msgpack.Marshal(ResolveRequest{SessionID: "s", FunctionCallID: "c=1", Decision: "allow"}); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, c := range codecs {
			var r ResolveRequest
			if c.Unmarshal(data, &r) != nil {
				continue
			}
			err := r.Validate()
			if err != nil {
				if !errors.Is(err, wire.ErrInvalidPayload) {
					t.Fatalf("%+v: %v is not invalid_payload", r, err)
				}
				continue
			}
			key, err := subjects.ApprovalKey(r.SessionID, r.FunctionCallID)
			if err != nil {
				t.Fatalf("valid %+v has no key: %v", r, err)
			}
			region := subjects.SessionRegion(r.SessionID)
			sid, callID, err := splitKey(region, key)
			if err != nil || sid != r.SessionID || callID != r.FunctionCallID {
				t.Fatalf("key %q of %+v splits into %q %q, %v", key, r, sid, callID, err)
			}
			tokens := 2
			if region != "" {
				tokens = 3
			}
			if strings.Count(key, ".") != tokens-1 || strings.ContainsAny(key, "*> ") {
				t.Fatalf("key %q of %+v is not %d plain tokens", key, r, tokens)
			}
		}
	})
}

// FuzzSettingsSetRequest: no panic; a valid request keeps at most
// MaxAlwaysAllow distinct valid patterns, never "*".
func FuzzSettingsSetRequest(f *testing.F) {
	for _, s := range []string{
		`{"session_id":"s1","mode":"auto","always_allow":["fs::read","fs::read","git::*"]}`,
		`{"session_id":"s1","always_allow":["*"]}`,
		`{"session_id":"s1","mode":null,"always_allow":null}`,
		`{"session_id":"s1","always_allow":[""]}`,
		`{"session_id":"s1","mode":"MANUAL"}`,
		`{"always_allow":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, c := range codecs {
			var r SettingsSetRequest
			if c.Unmarshal(data, &r) != nil {
				continue
			}
			if err := r.Validate(); err != nil {
				if !errors.Is(err, wire.ErrInvalidPayload) {
					t.Fatalf("%v is not invalid_payload", err)
				}
				continue
			}
			if r.Mode != nil && !r.Mode.Valid() {
				t.Fatalf("invalid mode %q passed", *r.Mode)
			}
			if r.AlwaysAllow == nil {
				continue
			}
			d := dedupe(*r.AlwaysAllow)
			if len(d) > MaxAlwaysAllow || d == nil {
				t.Fatalf("%d patterns", len(d))
			}
			seen := map[string]bool{}
			for _, p := range d {
				if p == "*" || agent.ValidatePattern(p) != nil || seen[p] {
					t.Fatalf("pattern %q passed", p)
				}
				seen[p] = true
			}
		}
	})
}

// FuzzDecide feeds arbitrary stored records and hashes to the decision
// step: no panic; an answer is either not_pending or a decided record that
// keeps every other field.
func FuzzDecide(f *testing.F) {
	f.Add([]byte(`{"status":"pending","args_hash":"`+goodHash+`","x":1}`), goodHash, "why")
	f.Add([]byte(`{"status":"pending"}`), "", "")
	f.Add([]byte(`{"status":"decided"}`), "", "")
	f.Add([]byte(`{"status":"pending","reason":"old","decided_at":"x"}`), "", "")
	f.Add([]byte(`{"status":"pending","status":"decided"}`), "", "")
	f.Add([]byte(`null`), "", "")
	f.Add([]byte(`{"status":"pending","args":[1]}`), "", "")
	f.Fuzz(func(t *testing.T, value []byte, hash, reason string) {
		req := ResolveRequest{SessionID: "s", FunctionCallID: "c", Decision: agent.DecisionDeny, ArgsHash: hash, Reason: reason}
		if req.Validate() != nil {
			return // decide only ever sees validated requests
		}
		stored, raw, werr := readRecord(value, req)
		var out []byte
		if werr == nil {
			out, werr = decide(stored, raw, req, verdict{Decision: req.Decision, Reason: reason, DecidedAt: 42})
		}
		if werr != nil {
			if !errors.Is(werr, wire.ErrNotPending) {
				t.Fatalf("%v is not not_pending", werr)
			}
			return
		}
		var rec agent.ApprovalRecord
		if err := json.Unmarshal(out, &rec); err != nil {
			t.Fatalf("decided record %s does not decode: %v", out, err)
		}
		if rec.Status != agent.ApprovalDecided || rec.Decision != agent.DecisionDeny || rec.DecidedAt != 42 || rec.Reason != reason {
			t.Fatalf("decided record %s", out)
		}
		var before, after map[string]json.RawMessage
		_ = json.Unmarshal(value, &before)
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatal(err)
		}
		for k, v := range before {
			switch k {
			case "status", "decision", "reason", "decided_at":
				continue
			}
			if string(after[k]) != compact(v) {
				t.Fatalf("field %q changed: %s → %s", k, v, after[k])
			}
		}
	})
}

func compact(v json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return string(v)
	}
	return b.String()
}

// FuzzPendingFrom reads arbitrary entries of a bucket copy as list_pending
// does: no panic; a listed entry is pending, its ids are valid, key back to
// key, and its session is homed in the copy's region.
func FuzzPendingFrom(f *testing.F) {
	f.Add("", "s1.toolu_01", []byte(`{"status":"pending","function_id":"fs::read","args":{"a":1},"requested_at":5}`))
	f.Add("", "s1.a=2Eb", []byte(`{"status":"pending"}`))
	f.Add("", "s1", []byte(`{"status":"pending"}`))
	f.Add("", "s1.x.y", []byte(`{"status":"decided"}`))
	f.Add("", "s1.x.y", []byte(`{"status":"pending"}`))
	f.Add("", "s1.=zz", []byte(`null`))
	f.Add("eu", "eu.s1.toolu_01", []byte(`{"status":"pending"}`))
	f.Add("eu", "us.s1.toolu_01", []byte(`{"status":"pending"}`))
	f.Add("eu", "eu.s1", []byte(`{"status":"pending"}`))
	f.Add("eu", "s1.c", []byte(`{"status":"pending"}`))
	f.Fuzz(func(t *testing.T, region, key string, value []byte) {
		p, err := pendingFrom(region, key, value)
		if err != nil || p == nil {
			return
		}
		if p.Args == nil {
			t.Fatal("nil args")
		}
		if r := subjects.SessionRegion(p.SessionID); r != region {
			t.Fatalf("key %q of copy %q lists session %q of region %q", key, region, p.SessionID, r)
		}
		back, err := subjects.ApprovalKey(p.SessionID, p.FunctionCallID)
		if err != nil || back != key {
			t.Fatalf("key %q lists as %q %q, which keys to %q, %v", key, p.SessionID, p.FunctionCallID, back, err)
		}
	})
}
