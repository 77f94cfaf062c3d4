package models

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers"
)

func TestList(t *testing.T) {
	t.Parallel()
	f := newFixture(t, acmeOpts()...)
	ctx := ctxT(t)
	all := []string{"acme-large-20260101", "acme-old", "acme-small", "zeta/vision-1.5"}
	for _, c := range []struct {
		name string
		req  ListRequest
		want []string
	}{
		{"all", ListRequest{}, all},
		{"provider", ListRequest{Provider: "acme"}, all[:3]},
		{"vision", ListRequest{Capability: agent.CapabilityVision}, []string{"acme-large-20260101", "zeta/vision-1.5"}},
		{"tools", ListRequest{Capability: agent.CapabilityTools}, []string{"acme-large-20260101", "acme-small"}},
		{"provider and thinking", ListRequest{Provider: "acme", Capability: agent.CapabilityThinking}, []string{"acme-large-20260101"}},
		{"cache of zeta", ListRequest{Provider: "zeta", Capability: agent.CapabilityCache}, []string{}},
		{"unknown provider", ListRequest{Provider: "nobody"}, []string{}},
	} {
		resp, err := engine.Call[ListResponse](ctx, f.e, ListFunction, c.req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if resp.Models == nil {
			t.Errorf("%s: models is nil", c.name)
		}
		if got := ids(resp.Models); !slices.Equal(got, c.want) {
			t.Errorf("%s: ids = %v, want %v", c.name, got, c.want)
		}
		for _, m := range resp.Models {
			if !m.Available || m.Reconciled {
				t.Errorf("%s: %s available=%v reconciled=%v", c.name, m.ID, m.Available, m.Reconciled)
			}
		}
	}
	for _, req := range []ListRequest{
		{Capability: "telepathy"},
		{Capability: "Tools"},
		{Provider: "a.b"},
		{Provider: strings.Repeat("p", 129)},
	} {
		if _, err := engine.Call[ListResponse](ctx, f.e, ListFunction, req); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("%+v: err = %v, want invalid_payload", req, err)
		}
	}
}

func TestGet(t *testing.T) {
	t.Parallel()
	f := newFixture(t, acmeOpts()...)
	ctx := ctxT(t)
	for _, c := range []struct {
		provider, id, want string
	}{
		{"acme", "acme-large-20260101", "acme-large-20260101"},
		{"acme", "acme-large", "acme-large-20260101"},
		{"acme", "acme-small", "acme-small"},
		{"zeta", "zeta/vision-1.5", "zeta/vision-1.5"},
		{"acme", "acme-huge", ""},
		{"zeta", "acme-small", ""},
		{"nobody", "acme-small", ""},
	} {
		m, err := engine.Call[*Model](ctx, f.e, GetFunction, GetRequest{Provider: c.provider, ModelID: c.id})
		if err != nil {
			t.Fatalf("get %s %s: %v", c.provider, c.id, err)
		}
		switch {
		case c.want == "" && m != nil:
			t.Errorf("get %s %s = %+v, want null", c.provider, c.id, *m)
		case c.want != "" && (m == nil || m.ID != c.want || m.Provider != c.provider || !m.Available):
			t.Errorf("get %s %s = %+v, want %s", c.provider, c.id, m, c.want)
		}
	}
	m, _ := engine.Call[*Model](ctx, f.e, GetFunction, GetRequest{Provider: "acme", ModelID: "acme-large"})
	want := agent.Model{
		ID: "acme-large-20260101", Provider: "acme", DisplayName: "Acme Large", ContextWindow: 200000, MaxOutputTokens: 64000,
		SupportsTools: true, SupportsVision: true, SupportsThink: true, SupportsCache: true,
		Pricing: agent.Pricing{InputPer1M: 3, OutputPer1M: 15, CacheReadPer1M: 0.3, CacheWritePer1M: 3.75},
	}
	if m.Model != want || !slices.Equal(m.Aliases, []string{"acme-large"}) {
		t.Errorf("get = %+v", *m)
	}
	for _, req := range []GetRequest{
		{Provider: "acme"},
		{ModelID: "acme-small"},
		{Provider: "acme", ModelID: "acme small"},
		{Provider: "acme", ModelID: "a\x01"},
		{Provider: "acme", ModelID: strings.Repeat("m", 257)},
		{Provider: "ac me", ModelID: "acme-small"},
	} {
		if _, err := engine.Call[*Model](ctx, f.e, GetFunction, req); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("%+v: err = %v, want invalid_payload", req, err)
		}
	}
	// What Get hands out is a copy.
	m1 := mustGet(t, f.s, "acme", "acme-large")
	m1.Aliases[0] = "changed"
	if mustGet(t, f.s, "acme", "acme-large").Aliases[0] != "acme-large" {
		t.Error("Get shares the catalog's alias slice")
	}
}

func TestSupports(t *testing.T) {
	t.Parallel()
	f := newFixture(t, acmeOpts()...)
	ctx := ctxT(t)
	for _, c := range []struct {
		provider, id, capability string
		want                     bool
	}{
		{"acme", "acme-large", agent.CapabilityTools, true},
		{"acme", "acme-large-20260101", agent.CapabilityThinking, true},
		{"acme", "acme-small", agent.CapabilityVision, false},
		{"acme", "acme-small", agent.CapabilityCache, true},
		{"acme", "acme-old", agent.CapabilityTools, false},
		{"zeta", "zeta/vision-1.5", agent.CapabilityVision, true},
		{"acme", "acme-unknown", agent.CapabilityTools, false},
		{"nobody", "x", agent.CapabilityCache, false},
	} {
		resp, err := engine.Call[SupportsResponse](ctx, f.e, SupportsFunction, SupportsRequest{Provider: c.provider, ModelID: c.id, Capability: c.capability})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Supported != c.want {
			t.Errorf("supports %s %s %s = %v, want %v", c.provider, c.id, c.capability, resp.Supported, c.want)
		}
	}
	for _, req := range []SupportsRequest{
		{Provider: "acme", ModelID: "acme-small", Capability: "telepathy"},
		{Provider: "acme", ModelID: "acme-unknown", Capability: ""},
		{Provider: "acme", ModelID: "", Capability: agent.CapabilityTools},
		{Provider: "", ModelID: "acme-small", Capability: agent.CapabilityTools},
	} {
		if _, err := engine.Call[SupportsResponse](ctx, f.e, SupportsFunction, req); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("%+v: err = %v, want invalid_payload", req, err)
		}
	}
}

// TestRawJSON talks to the functions the way `nats req` does: plain JSON,
// no Content-Type header.
func TestRawJSON(t *testing.T) {
	t.Parallel()
	f := newFixture(t, acmeOpts()...)
	nc := enginetest.Connect(t, f.ns)
	req := func(fn, body string) ([]byte, string) {
		t.Helper()
		msg, err := nc.Request(subjects.MustFunctionSubject(fn), []byte(body), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return msg.Data, msg.Header.Get("Nats-Service-Error-Code")
	}
	if subjects.MustFunctionSubject(ListFunction) != "iii.fn.models.list" {
		t.Fatalf("subject = %s", subjects.MustFunctionSubject(ListFunction))
	}
	body, code := req(ListFunction, `{"provider":"zeta"}`)
	if code != "" {
		t.Fatalf("error %s: %s", code, body)
	}
	var raw map[string][]map[string]any
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	if len(raw["models"]) != 1 {
		t.Fatalf("models = %s", body)
	}
	got := raw["models"][0]
	for k, v := range map[string]any{
		"id": "zeta/vision-1.5", "provider": "zeta", "display_name": "Zeta Vision 1.5",
		"context_window": 64000.0, "max_output_tokens": 4096.0, "supports_tools": false,
		"supports_vision": true, "supports_thinking": false, "supports_cache": false, "available": true,
	} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (%s)", k, got[k], v, body)
		}
	}
	if p, _ := got["pricing"].(map[string]any); p["input_per_1m"] != 0.5 || p["output_per_1m"] != 0.5 {
		t.Errorf("pricing = %v", got["pricing"])
	}
	if _, ok := got["reconciled"]; ok {
		t.Errorf("reconciled present on a catalog model: %s", body)
	}
	if body, _ := req(ListFunction, ``); !strings.HasPrefix(string(body), `{"models":[{`) {
		t.Errorf("empty body list = %s", body)
	}
	if body, code := req(GetFunction, `{"provider":"acme","model_id":"nope"}`); code != "" || string(body) != "null" {
		t.Errorf("unknown get = %s (%s), want null", body, code)
	}
	if body, code := req(SupportsFunction, `{"provider":"acme","model_id":"acme-large","capability":"vision"}`); code != "" || string(body) != `{"supported":true}` {
		t.Errorf("supports = %s (%s)", body, code)
	}
	for _, bad := range []string{`{"capability":"x"}`, `[]`, `{"provider":7}`, `{`} {
		body, code := req(ListFunction, bad)
		var env wire.Envelope
		if code != "400" || json.Unmarshal(body, &env) != nil || env.Error == nil || env.Error.Code != wire.CodeInvalidPayload {
			t.Errorf("%s: code %q body %s, want 400 invalid_payload", bad, code, body)
		}
	}
}

// TestModelCodecs: a Model keeps every field through both codecs, and a
// caller that only knows agent.Model reads the same fields.
func TestModelCodecs(t *testing.T) {
	t.Parallel()
	m := Model{
		Entry: Entry{Model: agent.Model{
			ID: "m", Provider: "p", DisplayName: "M", ContextWindow: 10, MaxOutputTokens: 5,
			SupportsTools: true, SupportsCache: true, Pricing: agent.Pricing{InputPer1M: 1.5, OutputPer1M: 2, CacheReadPer1M: 0.15},
		}, Aliases: []string{"m1"}},
		Available: false, Reconciled: true,
	}
	for _, c := range []wire.Codec{wire.JSON, wire.Msgpack} {
		b, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var back Model
		if err := c.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.Model != m.Model || !slices.Equal(back.Aliases, m.Aliases) || back.Available != m.Available || back.Reconciled != m.Reconciled {
			t.Errorf("%s: %+v, want %+v", c.ContentType(), back, m)
		}
		var plain agent.Model
		if err := c.Unmarshal(b, &plain); err != nil {
			t.Fatal(err)
		}
		if plain != m.Model {
			t.Errorf("%s as agent.Model: %+v, want %+v", c.ContentType(), plain, m.Model)
		}
	}
}

// TestEmbeddedOverBus: the default worker serves the embedded catalog, with
// the aliases of catalog.json.
func TestEmbeddedOverBus(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	for _, c := range [][3]string{
		{"anthropic", "claude-sonnet-4-5", "claude-sonnet-4-5-20250929"},
		{"anthropic", "claude-sonnet-4-5-20250929", "claude-sonnet-4-5-20250929"},
		{"anthropic", "claude-haiku-4-5", "claude-haiku-4-5-20251001"},
		{"openai", "gpt-5.6", "gpt-5.6-sol"},
		{"scripted", "echo", "echo"},
	} {
		m, err := engine.Call[*Model](ctx, f.e, GetFunction, GetRequest{Provider: c[0], ModelID: c[1]})
		if err != nil || m == nil || m.ID != c[2] {
			t.Errorf("get %s %s = %v, %v; want %s", c[0], c[1], m, err, c[2])
		}
	}
	resp, err := engine.Call[ListResponse](ctx, f.e, ListFunction, ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Models) != len(embedded) {
		t.Errorf("list has %d models, catalog %d", len(resp.Models), len(embedded))
	}
	if !slices.IsSortedFunc(resp.Models, func(a, b Model) int {
		if a.Provider != b.Provider {
			return strings.Compare(a.Provider, b.Provider)
		}
		return strings.Compare(a.ID, b.ID)
	}) {
		t.Errorf("list not sorted: %v", ids(resp.Models))
	}
}

// TestWithCatalog: an embedder's catalog replaces the embedded one, as the
// budget tests use it to price the scripted model.
func TestWithCatalog(t *testing.T) {
	t.Parallel()
	echo := agent.Model{ID: "echo", Provider: "scripted", ContextWindow: 1000, MaxOutputTokens: 100, SupportsTools: true,
		Pricing: agent.Pricing{InputPer1M: 1, OutputPer1M: 2}}
	f := newFixture(t, WithCatalog([]agent.Model{echo}))
	m := mustGet(t, f.s, "scripted", "echo")
	if m == nil || m.Model != echo {
		t.Fatalf("get = %+v", m)
	}
	if got := m.Pricing.Cost(agent.Usage{InputTokens: 1_000_000, OutputTokens: 500_000}); got != 2 {
		t.Errorf("cost = %v", got)
	}
	if l, _ := f.s.List("", ""); len(l) != 1 {
		t.Errorf("list = %v", ids(l))
	}
	for _, bad := range [][]agent.Model{
		{{ID: "echo", Provider: "scripted"}},
		{echo, echo},
		{{ID: "", Provider: "scripted", ContextWindow: 1, MaxOutputTokens: 1}},
	} {
		err := NewWorker(WithCatalog(bad)).Start(context.Background(), f.e)
		if !errors.Is(err, engine.ErrInvalidOption) || !errors.Is(err, ErrInvalidCatalog) {
			t.Errorf("WithCatalog(%+v): %v", bad, err)
		}
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	for _, opt := range []Option{
		WithLogger(nil),
		WithReconcileTimeout(0),
		WithReconcileTimeout(-time.Second),
		WithReconcileTimeout(MaxReconcileTimeout + 1),
		WithCatalogFile(filepath.Join(t.TempDir(), "missing.json")),
	} {
		if _, err := buildOptions([]Option{opt}); !errors.Is(err, engine.ErrInvalidOption) {
			t.Errorf("option error = %v, want ErrInvalidOption", err)
		}
	}
	o, err := buildOptions([]Option{nil, WithLogger(slog.New(slog.DiscardHandler)), WithReconcileTimeout(time.Second)})
	if err != nil || o.reconcileTimeout != time.Second || o.logger == nil {
		t.Errorf("options = %+v, %v", o, err)
	}
	if _, err := Open(context.Background(), nil); !errors.Is(err, engine.ErrInvalidOption) {
		t.Errorf("Open(nil engine) = %v", err)
	}
}

// TestProvision: the "file" setting, relative to Home, overrides the
// embedded catalog; a bad or missing file and unknown settings fail
// Provision.
func TestProvision(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(home, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("prices.json", `{"comment":"ops fix","models":[
		{"provider":"anthropic","id":"claude-sonnet-4-5","pricing":{"input_per_1m":2.5}},
		{"provider":"local","id":"llama-4","context_window":128000,"max_output_tokens":8192,"supports_tools":true,"pricing":{"input_per_1m":0,"output_per_1m":0}}]}`)
	write("bad.json", `{"models":[{"provider":"anthropic","id":"claude-sonnet-4-5","pricing":{"input_per_1m":-1}}]}`)
	write("typo.json", `{"models":[{"provider":"anthropic","id":"claude-sonnet-4-5","pricng":{}}]}`)
	env := func(settings map[string]string) workers.Env {
		return workers.Env{Home: home, Settings: map[string]map[string]string{WorkerName: settings}}
	}
	for _, c := range []struct {
		name     string
		settings map[string]string
	}{
		{"bad price", map[string]string{SettingFile: "bad.json"}},
		{"unknown field", map[string]string{SettingFile: "typo.json"}},
		{"missing file", map[string]string{SettingFile: "nope.json"}},
		{"empty path", map[string]string{SettingFile: ""}},
		{"unknown setting", map[string]string{"catalog": "prices.json"}},
	} {
		if err := (&Worker{}).Provision(context.Background(), env(c.settings)); !errors.Is(err, engine.ErrInvalidOption) {
			t.Errorf("%s: Provision = %v, want ErrInvalidOption", c.name, err)
		}
	}

	// Through the registry, as a node runs it.
	mod, err := workers.Global().Module(WorkerName)
	if err != nil {
		t.Fatal(err)
	}
	reg := workers.NewRegistry()
	if err := reg.Register(mod); err != nil {
		t.Fatal(err)
	}
	e := enginetest.Engine(t)
	ctx := ctxT(t)
	run, err := reg.Start(ctx, e, env(map[string]string{SettingFile: "prices.json"}), WorkerName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run.Close(context.Background()) })
	m, err := engine.Call[*Model](ctx, e, GetFunction, GetRequest{Provider: "anthropic", ModelID: "claude-sonnet-4-5-20250929"})
	if err != nil || m == nil {
		t.Fatalf("get = %v, %v", m, err)
	}
	if m.Pricing.InputPer1M != 2.5 || m.Pricing.OutputPer1M != 15 || m.ContextWindow != 200000 {
		t.Errorf("overridden model = %+v", *m)
	}
	l, err := engine.Call[*Model](ctx, e, GetFunction, GetRequest{Provider: "local", ModelID: "llama-4"})
	if err != nil || l == nil || !l.SupportsTools {
		t.Errorf("added model = %v, %v", l, err)
	}
	// An absolute path is used as is.
	abs := &Worker{}
	if err := abs.Provision(ctx, workers.Env{Home: "/nonexistent", Settings: map[string]map[string]string{WorkerName: {SettingFile: filepath.Join(home, "prices.json")}}}); err != nil {
		t.Errorf("absolute path: %v", err)
	}
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	ctx := ctxT(t)
	w := NewWorker()
	if w.Store() != nil {
		t.Error("store before Start")
	}
	if err := w.Close(ctx); err != nil {
		t.Errorf("Close before Start: %v", err)
	}
	if err := w.Start(ctx, e); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Start after Close = %v", err)
	}
	w = NewWorker()
	if err := w.Start(ctx, e); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx, e); !errors.Is(err, ErrStarted) {
		t.Errorf("second Start = %v", err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, err := engine.Call[ListResponse](ctx, e, ListFunction, ListRequest{}); !errors.Is(err, wire.ErrFunctionNotFound) {
		t.Errorf("list after Close = %v", err)
	}
}
