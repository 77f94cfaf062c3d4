package models

import (
	"fmt"
	"testing"

	"github.com/iii-on-nats/iii/engine"
)

// BenchmarkGet is the in-memory lookup every turn's provisioning pays, by
// id and by alias.
func BenchmarkGet(b *testing.B) {
	f := newFixture(b)
	for _, name := range []string{"claude-sonnet-4-5-20250929", "claude-sonnet-4-5"} {
		b.Run("by="+map[bool]string{true: "id", false: "alias"}[name == "claude-sonnet-4-5-20250929"], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if m, err := f.s.Get("anthropic", name); err != nil || m == nil {
					b.Fatal(m, err)
				}
			}
		})
	}
}

// BenchmarkCall is a models::get and a models::list round trip over NATS
// (msgpack, loopback, span per call).
func BenchmarkCall(b *testing.B) {
	f := newFixture(b)
	ctx := ctxT(b)
	b.Run("fn=get", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := engine.Call[*Model](ctx, f.e, GetFunction, GetRequest{Provider: "openai", ModelID: "gpt-6.2-sol"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(fmt.Sprintf("fn=list,models=%d", len(embedded)), func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := engine.Call[ListResponse](ctx, f.e, ListFunction, ListRequest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkReconcile is a reconcile whose answer changes nothing (the
// steady state of a periodic reconcile): one provider call, one bucket
// snapshot, no writes.
func BenchmarkReconcile(b *testing.B) {
	for _, n := range []int{10, 200} {
		b.Run(fmt.Sprintf("listed=%d", n), func(b *testing.B) {
			f := newFixture(b, acmeOpts()...)
			ctx := ctxT(b)
			ids := []string{"acme-large", "acme-small"}
			for i := len(ids); i < n; i++ {
				ids = append(ids, fmt.Sprintf("acme-extra-%03d", i))
			}
			serveProvider(b, f.e, "acme").set(ids...)
			if _, err := f.s.Reconcile(ctx, "acme"); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.s.Reconcile(ctx, "acme"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
