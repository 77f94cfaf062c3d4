package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

func reconcile(ctx context.Context, t testing.TB, e *engine.Engine, provider string) ReconcileResponse {
	t.Helper()
	resp, err := engine.Call[ReconcileResponse](ctx, e, ReconcileFunction, ReconcileRequest{Provider: provider})
	if err != nil {
		t.Fatalf("reconcile %s: %v", provider, err)
	}
	return resp
}

func checkLists(t testing.TB, got ReconcileResponse, known, added, missing []string, skipped int) {
	t.Helper()
	if !slices.Equal(got.Known, known) || !slices.Equal(got.Added, added) || !slices.Equal(got.Missing, missing) || got.Skipped != skipped {
		t.Errorf("reconcile = known %v added %v missing %v skipped %d;\n want known %v added %v missing %v skipped %d",
			got.Known, got.Added, got.Missing, got.Skipped, known, added, missing, skipped)
	}
}

// storedJSON reads the raw record of provider/id.
func storedJSON(t testing.TB, f *fixture, provider, id string) map[string]any {
	t.Helper()
	key, err := recordKey(provider, id)
	if err != nil {
		t.Fatal(err)
	}
	ent, err := f.kv.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("record %s: %v", key, err)
	}
	var raw map[string]any
	if err := json.Unmarshal(ent.Value(), &raw); err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestReconcile walks one provider through added, missing and known, and
// back.
func TestReconcile(t *testing.T) {
	t.Parallel()
	f := newFixture(t, acmeOpts()...)
	p := serveProvider(t, f.e, "acme")
	ctx := ctxT(t)

	// 1. The provider lists a model by its alias, a new one, an invalid id
	// and a duplicate; acme-old is gone.
	p.setModels(
		ProviderModel{ID: "acme-large", CreatedAt: "2026-01-01T00:00:00Z"},
		ProviderModel{ID: "acme-small", CreatedAt: 1767225600},
		ProviderModel{ID: "acme-new", DisplayName: "Acme New"},
		ProviderModel{ID: "bad id"},
		ProviderModel{ID: "acme-small"},
		ProviderModel{ID: "acme-weird", DisplayName: "bell\a"},
	)
	first := reconcile(ctx, t, f.e, "acme")
	checkLists(t, first, []string{"acme-large", "acme-small"}, []string{"acme-new", "acme-weird"}, []string{"acme-old"}, 2)
	if first.Provider != "acme" {
		t.Errorf("provider = %q", first.Provider)
	}

	// The answers of this replica reflect it at once.
	n := mustGet(t, f.s, "acme", "acme-new")
	if n == nil || !n.Reconciled || !n.Available || n.DisplayName != "Acme New" || n.SupportsTools || n.SupportsVision ||
		n.SupportsThink || n.SupportsCache || n.Pricing.InputPer1M != 0 || n.Pricing.OutputPer1M != 0 || n.ContextWindow != 0 {
		t.Errorf("reconciled model = %+v", n)
	}
	if w := mustGet(t, f.s, "acme", "acme-weird"); w == nil || w.DisplayName != "" {
		t.Errorf("display name with a control character kept: %+v", w)
	}
	if old := mustGet(t, f.s, "acme", "acme-old"); old == nil || old.Available || old.Reconciled || old.ContextWindow != 32000 {
		t.Errorf("missing model = %+v, want listed, available false, catalog fields", old)
	}
	if l := mustGet(t, f.s, "acme", "acme-large"); !l.Available {
		t.Error("known model unavailable")
	}
	list, _ := f.s.List("acme", "")
	if got := ids(list); !slices.Equal(got, []string{"acme-large-20260101", "acme-new", "acme-old", "acme-small", "acme-weird"}) {
		t.Errorf("list = %v", got)
	}
	if tools, _ := f.s.List("acme", "tools"); slices.Contains(ids(tools), "acme-new") {
		t.Error("reconciled model claims tools")
	}
	if ok, _ := f.s.Supports("acme", "acme-old", "tools"); ok {
		t.Error("acme-old supports tools")
	}

	// The bucket holds the flags in JSON.
	if raw := storedJSON(t, f, "acme", "acme-new"); raw["reconciled"] != true || raw["available"] != true || raw["id"] != "acme-new" {
		t.Errorf("stored added = %v", raw)
	}
	if raw := storedJSON(t, f, "acme", "acme-old"); raw["available"] != false || raw["reconciled"] != nil {
		t.Errorf("stored missing = %v", raw)
	}

	// 2. Idempotent: the same answer writes nothing and says the same.
	seq := lastSeq(t, f.e)
	again := reconcile(ctx, t, f.e, "acme")
	checkLists(t, again, first.Known, first.Added, first.Missing, first.Skipped)
	if s := lastSeq(t, f.e); s != seq {
		t.Errorf("second run wrote %d records", s-seq)
	}

	// 3. acme-old comes back (by its id), acme-new and acme-weird vanish;
	// the dated id of acme-large is listed instead of the alias.
	p.set("acme-large-20260101", "acme-small", "acme-old")
	third := reconcile(ctx, t, f.e, "acme")
	checkLists(t, third, []string{"acme-large-20260101", "acme-old", "acme-small"}, []string{}, []string{"acme-new", "acme-weird"}, 0)
	if old := mustGet(t, f.s, "acme", "acme-old"); !old.Available {
		t.Error("acme-old still unavailable")
	}
	if n := mustGet(t, f.s, "acme", "acme-new"); n == nil || n.Available || !n.Reconciled {
		t.Errorf("vanished reconciled model = %+v", n)
	}
	if raw := storedJSON(t, f, "acme", "acme-new"); raw["available"] != false || raw["reconciled"] != true || raw["display_name"] != "Acme New" {
		t.Errorf("stored vanished = %v", raw)
	}
	seq = lastSeq(t, f.e)
	checkLists(t, reconcile(ctx, t, f.e, "acme"), third.Known, third.Added, third.Missing, 0)
	if s := lastSeq(t, f.e); s != seq {
		t.Errorf("repeat of step 3 wrote %d records", s-seq)
	}

	// 4. Other providers are untouched; an empty answer marks all missing.
	if z := mustGet(t, f.s, "zeta", "zeta/vision-1.5"); !z.Available {
		t.Error("zeta touched")
	}
	serveProvider(t, f.e, "zeta").set()
	checkLists(t, reconcile(ctx, t, f.e, "zeta"), []string{}, []string{}, []string{"zeta/vision-1.5"}, 0)
	if z := mustGet(t, f.s, "zeta", "zeta/vision-1.5"); z.Available {
		t.Error("zeta/vision-1.5 still available")
	}
}

// TestReconcileUnavailable: nobody serves the provider function, it times
// out, it fails, or it lists too much — all unavailable, nothing written.
func TestReconcileUnavailable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, append(acmeOpts(), WithReconcileTimeout(200*time.Millisecond))...)
	ctx := ctxT(t)
	seq := lastSeq(t, f.e)

	_, err := engine.Call[ReconcileResponse](ctx, f.e, ReconcileFunction, ReconcileRequest{Provider: "acme"})
	if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "provider::acme::models") {
		t.Errorf("no provider: %v, want unavailable", err)
	}

	p := serveProvider(t, f.e, "acme")
	p.mu.Lock()
	p.block = true
	p.mu.Unlock()
	start := time.Now()
	_, err = engine.Call[ReconcileResponse](ctx, f.e, ReconcileFunction, ReconcileRequest{Provider: "acme"})
	if !errors.Is(err, wire.ErrUnavailable) || time.Since(start) > 3*time.Second {
		t.Errorf("slow provider: %v after %v, want unavailable", err, time.Since(start))
	}

	p.mu.Lock()
	p.block, p.err = false, wire.Errorf(wire.CodeInternal, "api key rejected")
	p.mu.Unlock()
	_, err = engine.Call[ReconcileResponse](ctx, f.e, ReconcileFunction, ReconcileRequest{Provider: "acme"})
	if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "api key rejected") {
		t.Errorf("failing provider: %v, want unavailable", err)
	}

	many := make([]string, MaxProviderModels+1)
	for i := range many {
		many[i] = fmt.Sprintf("m%d", i)
	}
	p.set(many...)
	if _, err := f.s.Reconcile(ctx, "acme"); !errors.Is(err, wire.ErrUnavailable) {
		t.Errorf("oversized answer: %v", err)
	}

	if s := lastSeq(t, f.e); s != seq {
		t.Errorf("failed reconciles wrote %d records", s-seq)
	}
	if old := mustGet(t, f.s, "acme", "acme-old"); !old.Available {
		t.Error("failed reconcile changed availability")
	}
	for _, bad := range []string{"", "a.b", "a b", strings.Repeat("p", 129)} {
		if _, err := engine.Call[ReconcileResponse](ctx, f.e, ReconcileFunction, ReconcileRequest{Provider: bad}); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("provider %q: %v, want invalid_payload", bad, err)
		}
	}
	// The caller giving up is canceled, not unavailable.
	p.mu.Lock()
	p.block = true
	p.mu.Unlock()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := f.s.Reconcile(cctx, "acme"); !errors.Is(err, wire.ErrCanceled) {
		t.Errorf("canceled caller: %v", err)
	}
}

// TestReplicas: a second store on the same bucket follows what the first
// reconciled, ignores records that do not decode or sit under the wrong
// key, and drops deleted ones.
func TestReplicas(t *testing.T) {
	t.Parallel()
	f := newFixture(t, acmeOpts()...)
	ctx := ctxT(t)
	e2 := enginetest.NewEngine(t, f.ns)
	s2, err := Open(ctx, e2, acmeOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Close(context.Background()) })

	serveProvider(t, f.e, "acme").set("acme-large", "acme-small", "acme-new")
	reconcile(ctx, t, f.e, "acme")
	enginetest.Eventually(t, 5*time.Second, func() error {
		n, _ := s2.Get("acme", "acme-new")
		old, _ := s2.Get("acme", "acme-old")
		if n == nil || !n.Reconciled || old == nil || old.Available {
			return fmt.Errorf("replica sees new=%v old=%v", n, old)
		}
		return nil
	})

	// A third store opened now loads the records before it answers.
	s3, err := Open(ctx, e2, acmeOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close(context.Background())
	if n, _ := s3.Get("acme", "acme-new"); n == nil {
		t.Error("a store opened after the reconcile misses its records")
	}

	// Hand-written junk is ignored; a valid reconciled record is served.
	junk := map[string]string{
		"acme.junk":      `{not json`,
		"acme.elsewhere": `{"id":"acme-x","provider":"acme","available":true,"reconciled":true}`,
		"acme.neg":       `{"id":"neg","provider":"acme","context_window":-1,"available":true,"reconciled":true}`,
		"acme.hand":      `{"id":"hand","provider":"acme","display_name":"By hand","context_window":1000,"available":true,"reconciled":true,"supports_tools":true}`,
		"gone.x":         `{"id":"x","provider":"gone","available":false}`,
	}
	for k, v := range junk {
		if _, err := f.kv.Put(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if h, _ := s2.Get("acme", "hand"); h == nil || !h.SupportsTools || h.ContextWindow != 1000 {
			return fmt.Errorf("hand-written record = %v", h)
		}
		return nil
	})
	for _, id := range []string{"junk", "acme-x", "neg"} {
		if m, _ := s2.Get("acme", id); m != nil {
			t.Errorf("junk record %s served: %+v", id, m)
		}
	}
	if m, _ := s2.Get("gone", "x"); m != nil {
		t.Errorf("mark without a catalog model served: %+v", m)
	}

	// Deleting a mark makes the model available again.
	key, _ := recordKey("acme", "acme-old")
	if err := f.kv.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if old, _ := s2.Get("acme", "acme-old"); !old.Available {
			return fmt.Errorf("acme-old still unavailable")
		}
		return nil
	})
}

// TestAliasRecordAfterCatalogUpdate: a model reconciled under a name the
// catalog later adopts as an alias (then vanished, so its record says
// unavailable) does not mask the catalog entry's availability: only the
// record under the entry's own id counts, as reconcile only writes that
// one.
func TestAliasRecordAfterCatalogUpdate(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	// Before: the catalog does not know acme-large; the provider lists it,
	// then stops.
	f := newFixture(t, WithCatalog(nil))
	p := serveProvider(t, f.e, "acme")
	p.set("acme-large")
	checkLists(t, reconcile(ctx, t, f.e, "acme"), []string{}, []string{"acme-large"}, []string{}, 0)
	p.set()
	checkLists(t, reconcile(ctx, t, f.e, "acme"), []string{}, []string{}, []string{"acme-large"}, 0)

	// After: a catalog whose acme-large-20260101 has the alias acme-large,
	// which the provider lists by its dated id.
	s2, err := Open(ctx, enginetest.NewEngine(t, f.ns), acmeOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Close(context.Background()) })
	p.set("acme-large-20260101", "acme-small", "acme-old")
	resp, err := s2.Reconcile(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	checkLists(t, resp, []string{"acme-large-20260101", "acme-old", "acme-small"}, []string{}, []string{}, 0)
	for _, name := range []string{"acme-large-20260101", "acme-large"} {
		if m := mustGet(t, s2, "acme", name); m == nil || !m.Available || m.Reconciled {
			t.Errorf("%s = %+v, want the catalog entry, available", name, m)
		}
	}
}

// TestReconcileAnswerFitsMaxPayload: a reconcile whose lists outgrow the
// server's max payload (a provider that lists new long ids on every run
// and drops the earlier ones, which missing keeps repeating) answers
// lists cut to fit, the number left out of each in *_omitted, added
// first, then missing, then known. Before, the answer failed with
// internal after the writes, and again on every retry.
func TestReconcileAnswerFitsMaxPayload(t *testing.T) {
	t.Parallel()
	const maxPayload = 16 << 10
	f := newFixtureOn(t, enginetest.RunServer(t, enginetest.WithMaxPayload(maxPayload)), acmeOpts()...)
	p := serveProvider(t, f.e, "acme")
	ctx := ctxT(t)
	catalog := []string{"acme-large", "acme-small", "acme-old"}

	check := func(step string, r ReconcileResponse, err error, known, added, missing int) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if got := len(r.Known) + r.KnownOmitted; got != known {
			t.Errorf("%s: %d known + %d omitted, want %d", step, len(r.Known), r.KnownOmitted, known)
		}
		if got := len(r.Added) + r.AddedOmitted; got != added {
			t.Errorf("%s: %d added + %d omitted, want %d", step, len(r.Added), r.AddedOmitted, added)
		}
		if got := len(r.Missing) + r.MissingOmitted; got != missing {
			t.Errorf("%s: %d missing + %d omitted, want %d", step, len(r.Missing), r.MissingOmitted, missing)
		}
		// Added, then missing, then known: a later list is cut only once
		// the earlier ones are whole.
		if r.AddedOmitted > 0 && len(r.Missing)+len(r.Known) > 0 || r.MissingOmitted > 0 && len(r.Known) > 0 {
			t.Errorf("%s: a later list holds ids while an earlier one was cut: %+v", step, r)
		}
		if !slices.IsSorted(r.Added) || !slices.IsSorted(r.Missing) || !slices.IsSorted(r.Known) {
			t.Errorf("%s: lists not sorted", step)
		}
		if raw, _ := json.Marshal(r); len(raw) > maxPayload-1024 {
			t.Errorf("%s: %d bytes of answer", step, len(raw))
		}
	}
	const batch, rounds = 60, 4
	for round := range rounds {
		ids := slices.Clone(catalog)
		for i := range batch {
			ids = append(ids, fmt.Sprintf("acme-%d-%03d-%s", round, i, strings.Repeat("x", 200)))
		}
		p.set(ids...)
		r, err := engine.Call[ReconcileResponse](ctx, f.e, ReconcileFunction, ReconcileRequest{Provider: "acme"})
		check(fmt.Sprintf("round %d", round), r, err, 3, batch, round*batch)
	}
	p.set(catalog...)
	for run := range 2 {
		r, err := engine.Call[ReconcileResponse](ctx, f.e, ReconcileFunction, ReconcileRequest{Provider: "acme"})
		check(fmt.Sprintf("all dropped, run %d", run), r, err, 3, 0, rounds*batch)
		if r.MissingOmitted == 0 || len(r.Missing) == 0 || len(r.Known) != 0 || r.KnownOmitted != 3 {
			t.Errorf("all dropped, run %d: %d missing (%d omitted), %d known (%d omitted): want missing cut, known left out",
				run, len(r.Missing), r.MissingOmitted, len(r.Known), r.KnownOmitted)
		}
	}
}

// TestReconcileDropsLongMissing: a reconciled model the provider stopped
// listing is stamped missing_since and listed in missing until the
// retention has passed; the next run then deletes its record (dropped),
// so the bucket and the answers do not keep every model a provider ever
// listed. Catalog models stay marked; a record written before stamps
// existed is stamped at its next run.
func TestReconcileDropsLongMissing(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock.Store(t0.UnixMilli())
	withClock := func(o *options) error {
		o.now = func() time.Time { return time.UnixMilli(clock.Load()) }
		return nil
	}
	f := newFixture(t, append(acmeOpts(), WithMissingRetention(time.Hour), withClock)...)
	p := serveProvider(t, f.e, "acme")
	ctx := ctxT(t)

	p.set("acme-large", "acme-small", "acme-new")
	checkLists(t, reconcile(ctx, t, f.e, "acme"), []string{"acme-large", "acme-small"}, []string{"acme-new"}, []string{"acme-old"}, 0)
	if _, err := f.kv.Put(ctx, "acme.legacy", []byte(`{"id":"legacy","provider":"acme","available":false,"reconciled":true}`)); err != nil {
		t.Fatal(err)
	}
	p.set("acme-large", "acme-small")
	checkLists(t, reconcile(ctx, t, f.e, "acme"), []string{"acme-large", "acme-small"}, []string{}, []string{"acme-new", "acme-old", "legacy"}, 0)
	for _, id := range []string{"acme-new", "acme-old", "legacy"} {
		if raw := storedJSON(t, f, "acme", id); raw["missing_since"] != float64(t0.UnixMilli()) {
			t.Errorf("%s: missing_since %v, want %d", id, raw["missing_since"], t0.UnixMilli())
		}
	}

	// Within the retention: the same answer, nothing written.
	clock.Store(t0.Add(50 * time.Minute).UnixMilli())
	seq := lastSeq(t, f.e)
	again := reconcile(ctx, t, f.e, "acme")
	checkLists(t, again, []string{"acme-large", "acme-small"}, []string{}, []string{"acme-new", "acme-old", "legacy"}, 0)
	if s := lastSeq(t, f.e); s != seq || again.Dropped != 0 {
		t.Errorf("within the retention: %d writes, %d dropped", s-seq, again.Dropped)
	}

	// Past it: the reconciled records go, the catalog's mark stays.
	clock.Store(t0.Add(61 * time.Minute).UnixMilli())
	past := reconcile(ctx, t, f.e, "acme")
	checkLists(t, past, []string{"acme-large", "acme-small"}, []string{}, []string{"acme-old"}, 0)
	if past.Dropped != 2 {
		t.Errorf("dropped %d, want 2", past.Dropped)
	}
	for _, id := range []string{"acme-new", "legacy"} {
		key, _ := recordKey("acme", id)
		if _, err := f.kv.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("record %s: %v, want deleted", id, err)
		}
		if m := mustGet(t, f.s, "acme", id); m != nil {
			t.Errorf("dropped %s still served: %+v", id, m)
		}
	}
	if old := mustGet(t, f.s, "acme", "acme-old"); old == nil || old.Available {
		t.Errorf("catalog model acme-old = %+v, want listed, unavailable", old)
	}
	seq = lastSeq(t, f.e)
	if r := reconcile(ctx, t, f.e, "acme"); r.Dropped != 0 || lastSeq(t, f.e) != seq {
		t.Errorf("a run after the drop: dropped %d, %d writes", r.Dropped, lastSeq(t, f.e)-seq)
	}

	// Listed again, a dropped model is added anew.
	p.set("acme-large", "acme-small", "acme-new")
	checkLists(t, reconcile(ctx, t, f.e, "acme"), []string{"acme-large", "acme-small"}, []string{"acme-new"}, []string{"acme-old"}, 0)
	if n := mustGet(t, f.s, "acme", "acme-new"); n == nil || !n.Available || !n.Reconciled {
		t.Errorf("acme-new listed again = %+v", n)
	}
	if raw := storedJSON(t, f, "acme", "acme-new"); raw["missing_since"] != nil {
		t.Errorf("available record keeps missing_since %v", raw["missing_since"])
	}
}

// TestReconcileBurstBuildsOnce: a reconcile that writes many records
// builds the served view once, on the store that wrote them and on a
// replica whose watch delivers them, not once per record (which made a
// reconcile of MaxProviderModels new models take seconds, and longer the
// more records the bucket held).
func TestReconcileBurstBuildsOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, acmeOpts()...)
	ctx := ctxT(t)
	s2, err := Open(ctx, enginetest.NewEngine(t, f.ns), acmeOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Close(context.Background()) })
	const n = 1000
	listed := []string{"acme-large", "acme-small", "acme-old"}
	for i := range n {
		listed = append(listed, fmt.Sprintf("acme-new-%04d", i))
	}
	serveProvider(t, f.e, "acme").set(listed...)
	before1, before2 := f.s.builds.Load(), s2.builds.Load()
	resp, err := f.s.Reconcile(ctx, "acme")
	if err != nil || len(resp.Added) != n {
		t.Fatalf("reconcile: %d added, %v", len(resp.Added), err)
	}
	enginetest.Eventually(t, 10*time.Second, func() error {
		s2.mu.Lock()
		got := len(s2.overlay)
		s2.mu.Unlock()
		if got != n {
			return fmt.Errorf("replica holds %d records, want %d", got, n)
		}
		return nil
	})
	for _, s := range []*Store{f.s, s2} {
		if m := mustGet(t, s, "acme", fmt.Sprintf("acme-new-%04d", n-1)); m == nil || !m.Reconciled {
			t.Fatalf("last added model = %+v", m)
		}
	}
	if b1, b2 := f.s.builds.Load()-before1, s2.builds.Load()-before2; b1 > 3 || b2 > 3 {
		t.Errorf("views built for %d writes: %d by the writer, %d by the replica; want at most 3 each", n, b1, b2)
	}
}

// TestReconcilePurgesOldMarkers: the delete marker a drop leaves under
// the key (the stream keeps one message per key, a marker included) is
// purged by a run once it is older than markerKeep, so a provider that
// keeps listing new names does not grow the bucket (and every replica's
// snapshot) by one marker per name for good. A younger marker stays, and
// a purge never takes a record written after the marker it read.
func TestReconcilePurgesOldMarkers(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	t0 := time.Now()
	clock.Store(t0.UnixMilli())
	withClock := func(o *options) error {
		o.now = func() time.Time { return time.UnixMilli(clock.Load()) }
		return nil
	}
	f := newFixture(t, append(acmeOpts(), WithMissingRetention(time.Minute), withClock)...)
	p := serveProvider(t, f.e, "acme")
	ctx := ctxT(t)
	st, err := f.e.JetStream().Stream(ctx, "KV_"+subjects.ModelsBucket)
	if err != nil {
		t.Fatal(err)
	}
	stored := func(key string) bool {
		t.Helper()
		_, err := st.GetLastMsgForSubject(ctx, "$KV."+subjects.ModelsBucket+"."+key)
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}

	p.set("acme-large", "acme-small", "acme-old", "acme-gone")
	reconcile(ctx, t, f.e, "acme")
	p.set("acme-large", "acme-small", "acme-old")
	reconcile(ctx, t, f.e, "acme")
	clock.Store(t0.Add(2 * time.Minute).UnixMilli())
	if r := reconcile(ctx, t, f.e, "acme"); r.Dropped != 1 {
		t.Fatalf("dropped %d, want 1", r.Dropped)
	}
	// A marker younger than markerKeep stays: a replica whose watch
	// resumes after a short outage still learns of the delete.
	reconcile(ctx, t, f.e, "acme")
	if !stored("acme.acme-gone") {
		t.Fatal("a young delete marker was purged")
	}
	clock.Store(t0.Add(2*time.Minute + markerKeep + time.Minute).UnixMilli())
	seq := lastSeq(t, f.e)
	reconcile(ctx, t, f.e, "acme")
	if stored("acme.acme-gone") {
		t.Error("the old delete marker of acme-gone is still stored")
	}
	if s := lastSeq(t, f.e); s != seq {
		t.Errorf("the purge wrote %d messages", s-seq)
	}
	f.s.mu.Lock()
	_, held := f.s.overlay["acme.acme-gone"]
	f.s.mu.Unlock()
	if held {
		t.Error("the store still holds the purged marker")
	}

	// A record written after the marker was read (by another replica,
	// say) survives the purge of that marker.
	if _, err := f.kv.Put(ctx, "acme.x", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := f.kv.Delete(ctx, "acme.x"); err != nil {
		t.Fatal(err)
	}
	marker := lastSeq(t, f.e)
	if _, err := f.kv.Put(ctx, "acme.x", []byte(`{"id":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if err := f.s.purgeMarker(ctx, st, "acme.x", marker); err != nil {
		t.Fatal(err)
	}
	if ent, err := f.kv.Get(ctx, "acme.x"); err != nil || string(ent.Value()) != `{"id":"x"}` {
		t.Errorf("record written after the marker: %v", err)
	}
}
