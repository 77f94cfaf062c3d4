package models

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

var codecs = []wire.Codec{wire.JSON, wire.Msgpack}

// FuzzRequests decodes arbitrary bytes as every request with both codecs:
// no panic, every refusal is invalid_payload, and a valid request's model
// id always has a bucket key that decodes back to it.
func FuzzRequests(f *testing.F) {
	for _, s := range []string{
		`{"provider":"anthropic","model_id":"claude-sonnet-4-5","capability":"tools"}`,
		`{"provider":"openai","model_id":"gpt-6.2-astra","capability":"vision"}`,
		`{"provider":"zeta","model_id":"zeta/vision-1.5","capability":"cache"}`,
		`{"provider":"a.b","model_id":"a//b","capability":"x"}`,
		`{"provider":"","model_id":" ","capability":""}`,
		`{"capability":7}`, `null`, `[]`, ``, "\xff",
	} {
		f.Add([]byte(s))
	}
	if b, err := wire.Msgpack.Marshal(SupportsRequest{Provider: "p", ModelID: "m=1/x", Capability: "thinking"}); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, c := range codecs {
			check := func(v interface{ Validate() error }) error {
				err := v.Validate()
				if err != nil && !errors.Is(err, wire.ErrInvalidPayload) {
					t.Fatalf("%+v: %v is not invalid_payload", v, err)
				}
				return err
			}
			var l ListRequest
			if c.Unmarshal(data, &l) == nil && check(l) == nil && l.Capability != "" && !validCapability(l.Capability) {
				t.Fatalf("capability %q accepted", l.Capability)
			}
			var g GetRequest
			if c.Unmarshal(data, &g) == nil && check(g) == nil {
				key, err := recordKey(g.Provider, g.ModelID)
				if err != nil {
					t.Fatalf("valid %+v has no key: %v", g, err)
				}
				provider, rest, _ := strings.Cut(key, ".")
				id, err := subjects.KeyFromKV(rest)
				if err != nil || provider != g.Provider || id != g.ModelID {
					t.Fatalf("key %q of %+v decodes to %q %q, %v", key, g, provider, id, err)
				}
				if strings.ContainsAny(key, "*> \t") {
					t.Fatalf("key %q is not a plain KV key", key)
				}
			}
			var s SupportsRequest
			if c.Unmarshal(data, &s) == nil && check(s) == nil && !validCapability(s.Capability) {
				t.Fatalf("capability %q accepted", s.Capability)
			}
			var r ReconcileRequest
			if c.Unmarshal(data, &r) == nil {
				_ = check(r)
			}
		}
	})
}

// FuzzParseCatalog: no panic; a catalog that parses is valid and survives
// encode → parse unchanged; applying it as overrides to the embedded
// catalog never panics and yields a valid catalog or ErrInvalidCatalog.
func FuzzParseCatalog(f *testing.F) {
	f.Add(embeddedJSON)
	for _, s := range []string{
		`{"models":[]}`,
		`{"models":[{"provider":"p","id":"m","aliases":["n"],"context_window":10,"max_output_tokens":5,"pricing":{"input_per_1m":1,"output_per_1m":2}}]}`,
		`{"models":[{"provider":"anthropic","id":"claude-sonnet-4-5","pricing":{"input_per_1m":2.5}}]}`,
		`{"models":[{"provider":"anthropic","id":"claude-haiku-4-5","aliases":[]}]}`,
		`{"models":[{"provider":"p","id":"m","context_window":1e400}]}`,
		`{"comment":"x","models":null}`, `{"models":[null]}`, `{"models":[{}]}`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := ParseCatalog(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidCatalog) {
				t.Fatalf("error %v does not wrap ErrInvalidCatalog", err)
			}
		} else {
			if err := ValidateCatalog(entries); err != nil {
				t.Fatalf("parsed catalog invalid: %v", err)
			}
			raws := make([]json.RawMessage, len(entries))
			for i, e := range entries {
				b, err := json.Marshal(e)
				if err != nil {
					t.Fatal(err)
				}
				raws[i] = b
			}
			doc, _ := json.Marshal(catalogFile{Models: raws})
			again, err := ParseCatalog(doc)
			if err != nil {
				t.Fatalf("re-encoded catalog refused: %v\n%s", err, doc)
			}
			if len(again) != len(entries) || (len(entries) > 0 && !reflect.DeepEqual(normalize(again), normalize(entries))) {
				t.Fatalf("round trip changed the catalog:\n%+v\n%+v", entries, again)
			}
		}
		out, err := ApplyOverrides(embedded, data)
		if err != nil {
			if !errors.Is(err, ErrInvalidCatalog) {
				t.Fatalf("override error %v does not wrap ErrInvalidCatalog", err)
			}
			return
		}
		if err := ValidateCatalog(out); err != nil {
			t.Fatalf("overridden catalog invalid: %v", err)
		}
		if len(out) < len(embedded) {
			t.Fatalf("overrides dropped models: %d < %d", len(out), len(embedded))
		}
	})
}

// normalize makes empty and nil alias lists equal.
func normalize(es []Entry) []Entry {
	out := cloneEntries(es)
	for i := range out {
		if len(out[i].Aliases) == 0 {
			out[i].Aliases = nil
		}
	}
	return out
}

// FuzzDecodeRecord: no panic; a record that decodes sits under its own key
// and has a printable display name and sane numbers.
func FuzzDecodeRecord(f *testing.F) {
	f.Add("acme.acme-new", []byte(`{"id":"acme-new","provider":"acme","available":true,"reconciled":true}`))
	f.Add("zeta.zeta.vision-1=2E5", []byte(`{"id":"zeta/vision-1.5","provider":"zeta","available":false}`))
	f.Add("acme.x", []byte(`{"id":"y","provider":"acme"}`))
	f.Add("acme.x", []byte(`{"id":"x","provider":"acme","pricing":{"input_per_1m":-1}}`))
	f.Add("", []byte(`null`))
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		rec, err := decodeRecord(key, value)
		if err != nil {
			return
		}
		want, err := recordKey(rec.Provider, rec.ID)
		if err != nil || want != key {
			t.Fatalf("record %+v accepted under %q (its key %q, %v)", *rec, key, want, err)
		}
		if validDisplayName(rec.DisplayName) != nil || validPricing(rec.Pricing) != nil || rec.ContextWindow < 0 || rec.MaxOutputTokens < 0 {
			t.Fatalf("record %+v accepted", *rec)
		}
	})
}
