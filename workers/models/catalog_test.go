package models

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers/scripted"
)

// TestEmbeddedCatalog: catalog.json parses, and every entry is sound on
// its own terms, not only through ParseCatalog's checks.
func TestEmbeddedCatalog(t *testing.T) {
	t.Parallel()
	entries, err := ParseCatalog(embeddedJSON)
	if err != nil {
		t.Fatal(err)
	}
	perProvider := map[string]int{}
	names := map[string]string{}
	for _, e := range entries {
		perProvider[e.Provider]++
		if err := ValidateEntry(e); err != nil {
			t.Errorf("%s %s: %v", e.Provider, e.ID, err)
		}
		if e.ContextWindow <= 0 || e.MaxOutputTokens <= 0 {
			t.Errorf("%s %s: limits %d/%d", e.Provider, e.ID, e.ContextWindow, e.MaxOutputTokens)
		}
		p := e.Pricing
		for _, v := range []float64{p.InputPer1M, p.OutputPer1M, p.CacheReadPer1M, p.CacheWritePer1M} {
			if v < 0 {
				t.Errorf("%s %s: negative price %v", e.Provider, e.ID, v)
			}
		}
		if e.DisplayName == "" {
			t.Errorf("%s %s: no display name", e.Provider, e.ID)
		}
		for _, n := range append([]string{e.ID}, e.Aliases...) {
			k := e.Provider + " " + n
			if owner, dup := names[k]; dup {
				t.Errorf("%s name %q used by %s and %s", e.Provider, n, owner, e.ID)
			}
			names[k] = e.ID
			if _, err := recordKey(e.Provider, n); err != nil {
				t.Errorf("%s %q has no bucket key: %v", e.Provider, n, err)
			}
		}
		if e.Provider == "anthropic" || e.Provider == "openai" {
			// Real models: priced, cached reads discounted, writes not.
			if p.InputPer1M <= 0 || p.OutputPer1M < p.InputPer1M {
				t.Errorf("%s %s: implausible prices %+v", e.Provider, e.ID, p)
			}
			if !e.SupportsCache || p.CacheReadPer1M <= 0 || p.CacheReadPer1M >= p.InputPer1M {
				t.Errorf("%s %s: cache read %v for input %v", e.Provider, e.ID, p.CacheReadPer1M, p.InputPer1M)
			}
			if p.CacheWritePer1M != 0 && p.CacheWritePer1M < p.InputPer1M {
				t.Errorf("%s %s: cache write %v below input %v", e.Provider, e.ID, p.CacheWritePer1M, p.InputPer1M)
			}
			if !e.SupportsTools {
				t.Errorf("%s %s: no tools", e.Provider, e.ID)
			}
		}
	}
	for _, p := range []string{"anthropic", "openai", scripted.ProviderName} {
		if perProvider[p] == 0 {
			t.Errorf("no %s models", p)
		}
	}
	var echo *Entry
	for i := range entries {
		if entries[i].Provider == scripted.ProviderName && entries[i].ID == scripted.EchoModel {
			echo = &entries[i]
		}
	}
	if echo == nil {
		t.Fatal("scripted echo missing")
	}
	if !echo.SupportsTools || echo.Pricing != (agent.Pricing{}) {
		t.Errorf("echo = %+v, want tools and price 0", *echo)
	}
	// The brief's alias example resolves both ways.
	if names["anthropic claude-sonnet-4-5"] != "claude-sonnet-4-5-20250929" || names["anthropic claude-sonnet-4-5-20250929"] != "claude-sonnet-4-5-20250929" {
		t.Error("claude-sonnet-4-5 and its dated id do not name one entry")
	}
	// Embedded returns a copy.
	cp := Embedded()
	cp[0].ID = "changed"
	cp[0].Aliases = append(cp[0].Aliases, "x")
	if Embedded()[0].ID == "changed" {
		t.Error("Embedded shares its backing array")
	}
}

func TestParseCatalogRefuses(t *testing.T) {
	t.Parallel()
	const good = `{"provider":"p","id":"m","context_window":10,"max_output_tokens":5,"pricing":{"input_per_1m":1,"output_per_1m":2}}`
	doc := func(entries ...string) string { return `{"models":[` + strings.Join(entries, ",") + `]}` }
	if _, err := ParseCatalog([]byte(doc(good))); err != nil {
		t.Fatalf("good catalog refused: %v", err)
	}
	if got, err := ParseCatalog([]byte(`{"models":[]}`)); err != nil || len(got) != 0 {
		t.Fatalf("empty catalog: %v %v", got, err)
	}
	cases := []struct {
		name, data, want string
	}{
		{"not json", `{`, "unexpected EOF"},
		{"no models", `{}`, `no "models"`},
		{"null models", `{"models":null}`, `no "models"`},
		{"unknown top field", `{"models":[],"modles":[]}`, "unknown field"},
		{"unknown entry field", doc(strings.Replace(good, `"id"`, `"ctx":1,"id"`, 1)), "unknown field"},
		{"typo in price", doc(strings.Replace(good, "input_per_1m", "input_per_mtok", 1)), "unknown field"},
		{"trailing data", doc(good) + `{}`, "trailing data"},
		{"zero context", doc(strings.Replace(good, `"context_window":10`, `"context_window":0`, 1)), "context_window 0"},
		{"negative output", doc(strings.Replace(good, `"max_output_tokens":5`, `"max_output_tokens":-1`, 1)), "max_output_tokens -1"},
		{"output above context", doc(strings.Replace(good, `"max_output_tokens":5`, `"max_output_tokens":11`, 1)), "exceeds context_window"},
		{"negative price", doc(strings.Replace(good, `"input_per_1m":1`, `"input_per_1m":-1`, 1)), "pricing.input_per_1m"},
		{"bad provider", doc(strings.Replace(good, `"provider":"p"`, `"provider":"a.b"`, 1)), "provider"},
		{"empty id", doc(strings.Replace(good, `"id":"m"`, `"id":""`, 1)), "empty"},
		{"id with space", doc(strings.Replace(good, `"id":"m"`, `"id":"m 1"`, 1)), "whitespace"},
		{"id with empty segment", doc(strings.Replace(good, `"id":"m"`, `"id":"a//b"`, 1)), "empty '/' segment"},
		{"display name control", doc(strings.Replace(good, `"id":"m"`, `"id":"m","display_name":"a\u0007"`, 1)), "control"},
		{"duplicate id", doc(good, good), "already taken"},
		{"alias repeats id", doc(strings.Replace(good, `"id":"m"`, `"id":"m","aliases":["m"]`, 1)), "repeats the id"},
		{"alias taken by another id", doc(good, strings.Replace(good, `"id":"m"`, `"id":"n","aliases":["m"]`, 1)), "already taken"},
		{"same id other provider is fine", "", ""},
	}
	for _, c := range cases {
		if c.data == "" {
			other := strings.Replace(good, `"provider":"p"`, `"provider":"q"`, 1)
			if _, err := ParseCatalog([]byte(doc(good, other))); err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		_, err := ParseCatalog([]byte(c.data))
		if !errors.Is(err, ErrInvalidCatalog) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrInvalidCatalog containing %q", c.name, err, c.want)
		}
	}
	big := make([]byte, MaxCatalogFileBytes+1)
	if _, err := ParseCatalog(big); !errors.Is(err, ErrInvalidCatalog) {
		t.Errorf("oversized file: %v", err)
	}
}

func TestApplyOverrides(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(acmeFile)
	if err != nil {
		t.Fatal(err)
	}
	base, err := ParseCatalog(data)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := json.Marshal(base)
	find := func(es []Entry, provider, id string) *Entry {
		for i := range es {
			if es[i].Provider == provider && es[i].ID == id {
				return &es[i]
			}
		}
		return nil
	}
	t.Run("price by id keeps the other fields", func(t *testing.T) {
		out, err := ApplyOverrides(base, []byte(`{"models":[{"provider":"acme","id":"acme-small","pricing":{"output_per_1m":2}}]}`))
		if err != nil {
			t.Fatal(err)
		}
		e := find(out, "acme", "acme-small")
		if e.Pricing.OutputPer1M != 2 || e.Pricing.InputPer1M != 0.25 || e.ContextWindow != 100000 || !e.SupportsTools || e.DisplayName != "Acme Small" {
			t.Errorf("merged entry = %+v", *e)
		}
	})
	t.Run("by alias, booleans set false", func(t *testing.T) {
		out, err := ApplyOverrides(base, []byte(`{"models":[{"provider":"acme","id":"acme-large","supports_vision":false}]}`))
		if err != nil {
			t.Fatal(err)
		}
		e := find(out, "acme", "acme-large-20260101")
		if e == nil || e.SupportsVision || !e.SupportsTools || len(e.Aliases) != 1 {
			t.Errorf("entry = %+v", e)
		}
		if find(out, "acme", "acme-large") != nil {
			t.Error("override by alias added an entry")
		}
	})
	t.Run("adds a complete model", func(t *testing.T) {
		out, err := ApplyOverrides(base, []byte(`{"models":[{"provider":"acme","id":"acme-x","aliases":["x"],"context_window":9,"max_output_tokens":9,"pricing":{"input_per_1m":1,"output_per_1m":1}}]}`))
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != len(base)+1 || find(out, "acme", "acme-x") == nil {
			t.Errorf("out = %v", out)
		}
	})
	for _, c := range []struct{ name, data, want string }{
		{"incomplete new model", `{"models":[{"provider":"acme","id":"acme-x","pricing":{"input_per_1m":1}}]}`, "context_window 0"},
		{"unknown field", `{"models":[{"provider":"acme","id":"acme-small","prices":{}}]}`, "unknown field"},
		{"bad provider", `{"models":[{"provider":"","id":"acme-small"}]}`, "provider"},
		{"bad id", `{"models":[{"provider":"acme","id":" "}]}`, "whitespace"},
		{"alias clash", `{"models":[{"provider":"acme","id":"acme-small","aliases":["acme-large"]}]}`, "already taken"},
		{"negative price", `{"models":[{"provider":"acme","id":"acme-old","pricing":{"input_per_1m":-0.5}}]}`, "pricing.input_per_1m"},
		{"not an object", `{"models":[7]}`, "cannot unmarshal"},
	} {
		if _, err := ApplyOverrides(base, []byte(c.data)); !errors.Is(err, ErrInvalidCatalog) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
	after, _ := json.Marshal(base)
	if string(before) != string(after) {
		t.Error("ApplyOverrides changed its base")
	}
}

func TestValidateModelID(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		id string
		ok bool
	}{
		{"claude-sonnet-4-5-20250929", true},
		{"gpt-6.2-astra", true},
		{"accounts/fireworks/models/llama", true},
		{"ü-model:latest*", true},
		{strings.Repeat("a", MaxModelIDLen), true},
		{"", false},
		{strings.Repeat("a", MaxModelIDLen+1), false},
		{"a b", false},
		{"a\tb", false},
		{"a\u00a0b", false},
		{"a\x00b", false},
		{"\xff", false},
		{"/a", false},
		{"a/", false},
		{"a//b", false},
	} {
		err := ValidateModelID(c.id)
		if (err == nil) != c.ok {
			t.Errorf("ValidateModelID(%q) = %v, want ok=%v", c.id, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidModelID) {
			t.Errorf("ValidateModelID(%q) = %v, not ErrInvalidModelID", c.id, err)
		}
		if err == nil {
			k, kerr := recordKey("p", c.id)
			if kerr != nil {
				t.Errorf("valid id %q has no key: %v", c.id, kerr)
				continue
			}
			back, serr := subjects.KeyFromKV(strings.TrimPrefix(k, "p."))
			if serr != nil || back != c.id {
				t.Errorf("key %q of %q decodes to %q, %v", k, c.id, back, serr)
			}
		}
	}
}

// TestPricingBounded: a price above MaxPricePer1M is refused in a catalog
// file and ignored in a foreign KV record, so the cost of any usage,
// however many tokens, stays finite and non-negative (1e300 made it +Inf:
// a budget could not settle it and the message's usage would not encode).
func TestPricingBounded(t *testing.T) {
	t.Parallel()
	huge := agent.Usage{InputTokens: math.MaxInt64, OutputTokens: math.MaxInt64, CacheReadTokens: math.MaxInt64, CacheWriteTokens: math.MaxInt64}
	top := agent.Pricing{InputPer1M: MaxPricePer1M, OutputPer1M: MaxPricePer1M, CacheReadPer1M: MaxPricePer1M, CacheWritePer1M: MaxPricePer1M}
	if c := top.Cost(huge); math.IsInf(c, 0) || math.IsNaN(c) || c < 0 {
		t.Fatalf("cost at the top price = %v", c)
	}
	for _, field := range []string{"input_per_1m", "output_per_1m", "cache_read_per_1m", "cache_write_per_1m"} {
		for _, price := range []string{"1e300", "1.7976931348623157e308", "1000000.5"} {
			pricing := `{"input_per_1m":1,"output_per_1m":2,"` + field + `":` + price + `}`
			entry := `{"provider":"p","id":"m","context_window":10,"max_output_tokens":5,"pricing":` + pricing + `}`
			if _, err := ParseCatalog([]byte(`{"models":[` + entry + `]}`)); !errors.Is(err, ErrInvalidCatalog) || !strings.Contains(err.Error(), "pricing."+field) {
				t.Errorf("catalog %s=%s: err = %v", field, price, err)
			}
			rec := `{"id":"m","provider":"p","available":true,"reconciled":true,"pricing":` + pricing + `}`
			if r, err := decodeRecord("p.m", []byte(rec)); err == nil {
				t.Errorf("record %s=%s accepted: cost %v", field, price, r.Pricing.Cost(huge))
			}
		}
	}
	entry := `{"provider":"p","id":"m","context_window":10,"max_output_tokens":5,"pricing":{"input_per_1m":1000000,"output_per_1m":1000000}}`
	if _, err := ParseCatalog([]byte(`{"models":[` + entry + `]}`)); err != nil {
		t.Errorf("the top price refused: %v", err)
	}
}

// TestApplyOverridesAliasMoved: an override that takes an alias off an
// entry frees the name, so a later entry of the same file under that name
// adds a model instead of overwriting the entry that no longer has it.
func TestApplyOverridesAliasMoved(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(acmeFile)
	if err != nil {
		t.Fatal(err)
	}
	base, err := ParseCatalog(data)
	if err != nil {
		t.Fatal(err)
	}
	out, err := ApplyOverrides(base, []byte(`{"models":[
		{"provider":"acme","id":"acme-large-20260101","aliases":[]},
		{"provider":"acme","id":"acme-large","display_name":"Acme Large 2","context_window":300000,"max_output_tokens":9000,"pricing":{"input_per_1m":7,"output_per_1m":21}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]Entry{}
	for _, e := range out {
		byID[e.Provider+" "+e.ID] = e
	}
	old, ok := byID["acme acme-large-20260101"]
	if !ok || len(old.Aliases) != 0 || old.DisplayName != "Acme Large" || old.Pricing.InputPer1M != 3 || old.ContextWindow != 200000 {
		t.Errorf("acme-large-20260101 = %+v, want its own fields and no alias", old)
	}
	added, ok := byID["acme acme-large"]
	if !ok || added.DisplayName != "Acme Large 2" || added.Pricing.InputPer1M != 7 || added.ContextWindow != 300000 {
		t.Errorf("acme-large = %+v (found %v), want the added model", added, ok)
	}
	if len(out) != len(base)+1 {
		t.Errorf("%d entries, want %d", len(out), len(base)+1)
	}
}
