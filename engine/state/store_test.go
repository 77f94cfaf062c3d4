package state_test

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/state"
	"github.com/iii-on-nats/iii/engine/wire"
)

func TestStoreSetGetDelete(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	ctx := testCtx(t)
	s := v.store

	if _, _, err := s.Get(ctx, "sessions", "abc"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("Get missing = %v, want not_found", err)
	}
	old, nv, err := s.Set(ctx, "sessions", "abc", map[string]any{"n": 1, "tag": "<b>"})
	if err != nil || old != nil || toJSON(t, nv) != `{"n":1,"tag":"<b>"}` {
		t.Fatalf("Set = %v, %v, %v", old, nv, err)
	}
	// Stored as readable JSON under "<scope>.<key>" (what `nats kv get` shows).
	raw, err := s.KeyValue().Get(ctx, "sessions.abc")
	if err != nil || string(raw.Value()) != `{"n":1,"tag":"<b>"}` {
		t.Fatalf("raw KV value = %q, %v", raw.Value(), err)
	}
	old, nv, err = s.Set(ctx, "sessions", "abc", []int{1, 2})
	if err != nil || toJSON(t, old) != `{"n":1,"tag":"<b>"}` || toJSON(t, nv) != `[1,2]` {
		t.Fatalf("second Set = %v, %v, %v", old, nv, err)
	}
	got, rev, err := s.Get(ctx, "sessions", "abc")
	if err != nil || toJSON(t, got) != `[1,2]` || rev != 2 {
		t.Fatalf("Get = %v, %d, %v", got, rev, err)
	}
	// Explicit null is a stored value, not a missing key.
	if _, _, err := s.Set(ctx, "sessions", "nil", nil); err != nil {
		t.Fatal(err)
	}
	if got, rev, err := s.Get(ctx, "sessions", "nil"); err != nil || got != nil || rev == 0 {
		t.Fatalf("Get null = %v, %d, %v", got, rev, err)
	}
	old, err = s.Delete(ctx, "sessions", "abc")
	if err != nil || toJSON(t, old) != `[1,2]` {
		t.Fatalf("Delete = %v, %v", old, err)
	}
	if _, _, err := s.Get(ctx, "sessions", "abc"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("Get deleted = %v", err)
	}
	before := v.msgs(t)
	if old, err := s.Delete(ctx, "sessions", "abc"); err != nil || old != nil {
		t.Fatalf("Delete missing = %v, %v", old, err)
	}
	if v.msgs(t) != before {
		t.Fatal("Delete of a missing key wrote a marker")
	}
	// Set after delete creates again.
	if old, _, err := s.Set(ctx, "sessions", "abc", "again"); err != nil || old != nil {
		t.Fatalf("Set after delete = %v, %v", old, err)
	}
	// Keys with segments and odd characters round-trip.
	if _, _, err := s.Set(ctx, "files", "dir/a b.txt", 1); err != nil {
		t.Fatal(err)
	}
	if got, _, err := s.Get(ctx, "files", "dir/a b.txt"); err != nil || got != int64(1) {
		t.Fatalf("Get escaped key = %v, %v", got, err)
	}
}

func TestStoreUpdate(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	ctx := testCtx(t)
	s := v.store

	old, nv, err := s.Update(ctx, "c", "k", []state.Op{state.Increment("counters.hits", 1), state.Append("log", "a")})
	if err != nil || old != nil || toJSON(t, nv) != `{"counters":{"hits":1},"log":["a"]}` {
		t.Fatalf("Update on missing = %v, %v, %v", old, nv, err)
	}
	old, nv, err = s.Update(ctx, "c", "k", []state.Op{state.Increment("counters.hits", 2)})
	if err != nil || toJSON(t, old) != `{"counters":{"hits":1},"log":["a"]}` || toJSON(t, nv) != `{"counters":{"hits":3},"log":["a"]}` {
		t.Fatalf("Update = %v, %v, %v", old, nv, err)
	}
	_, rev, _ := s.Get(ctx, "c", "k")

	// A no-op update writes nothing.
	before := v.msgs(t)
	if _, _, err := s.Update(ctx, "c", "k", []state.Op{state.Remove("missing", nil), state.Set("log.0", "a")}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Update(ctx, "c", "absent", []state.Op{state.Remove("x", nil)}); err != nil {
		t.Fatal(err)
	}
	if _, rev2, _ := s.Get(ctx, "c", "k"); rev2 != rev || v.msgs(t) != before {
		t.Fatalf("no-op update wrote: rev %d -> %d", rev, rev2)
	}
	if _, _, err := s.Get(ctx, "c", "absent"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("no-op update created the key: %v", err)
	}

	// A failing op writes nothing.
	_, _, err = s.Update(ctx, "c", "k", []state.Op{state.Set("ok", 1), state.Increment("log", 1)})
	if !errors.Is(err, wire.ErrInvalidPayload) || !errors.Is(err, state.ErrInvalidOp) {
		t.Fatalf("type confusion = %v", err)
	}
	if got, rev2, _ := s.Get(ctx, "c", "k"); rev2 != rev || toJSON(t, got) != `{"counters":{"hits":3},"log":["a"]}` {
		t.Fatalf("failed update changed the value: %v", got)
	}
}

// TestStoreCAS runs two updaters on two connections against one counter:
// 200 increments must give exactly 200.
func TestStoreCAS(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	ctx := testCtx(t)
	stores := []*state.Store{
		newStore(t, enginetest.NewEngine(t, ns)),
		newStore(t, enginetest.NewEngine(t, ns)),
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if _, _, err := s.Update(ctx, "cas", "counter", []state.Op{state.Increment("n", 1)}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, _, err := stores[0].Get(ctx, "cas", "counter")
	if err != nil || toJSON(t, got) != `{"n":200}` {
		t.Fatalf("counter = %v, %v", got, err)
	}
}

func TestStoreList(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	ctx := testCtx(t)
	s := v.store
	for _, k := range []string{"a", "a/b", "a/b/c", "ab", "b", "gone"} {
		if _, _, err := s.Set(ctx, "l", k, k); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Set(ctx, "other", "a", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, "l", "gone"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		prefix string
		want   string
	}{
		{"", "a a/b a/b/c ab b"},
		{"a", "a a/b a/b/c"},
		{"a/", "a/b a/b/c"},
		{"a/b", "a/b a/b/c"},
		{"a/b/c", "a/b/c"},
		{"zz", ""},
		{"gone", ""},
	}
	for _, tt := range tests {
		items, err := s.List(ctx, "l", tt.prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", tt.prefix, err)
		}
		var keys []string
		for _, it := range items {
			if it.Value != it.Key || it.Revision == 0 {
				t.Fatalf("List(%q) item %+v", tt.prefix, it)
			}
			keys = append(keys, it.Key)
		}
		if got := strings.Join(keys, " "); got != tt.want {
			t.Fatalf("List(%q) = %q, want %q", tt.prefix, got, tt.want)
		}
	}
	if items, err := s.List(ctx, "empty", ""); err != nil || len(items) != 0 {
		t.Fatalf("List empty scope = %v, %v", items, err)
	}
}

func TestStoreBadInput(t *testing.T) {
	t.Parallel()
	v := newEnv(t, []enginetest.ServerOption{enginetest.WithMaxPayload(64 << 10)})
	ctx := testCtx(t)
	s := v.store
	if _, _, err := s.Set(ctx, "ok", "k", map[string]any{"s": "x"}); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", s.MaxValueSize())
	// nested is a value of arrays depth deep, an integer at the bottom.
	nested := func(depth int) any {
		var v any = 1
		for range depth {
			v = []any{v}
		}
		return v
	}
	if s.MaxValueSize() >= 32<<10 {
		t.Fatalf("MaxValueSize %d not below half the max payload", s.MaxValueSize())
	}
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"wildcard scope", func() error { _, _, err := s.Set(ctx, "a*", "k", 1); return err }, wire.ErrInvalidPayload},
		{"gt scope", func() error { _, _, err := s.Set(ctx, ">", "k", 1); return err }, wire.ErrInvalidPayload},
		{"dot in scope", func() error { _, _, err := s.Set(ctx, "a.b", "k", 1); return err }, wire.ErrInvalidPayload},
		{"space in scope", func() error { _, _, err := s.Set(ctx, "a b", "k", 1); return err }, wire.ErrInvalidPayload},
		{"empty scope", func() error { _, _, err := s.Set(ctx, "", "k", 1); return err }, wire.ErrInvalidPayload},
		{"empty key", func() error { _, _, err := s.Set(ctx, "ok", "", 1); return err }, wire.ErrInvalidPayload},
		{"empty key segment", func() error { _, _, err := s.Set(ctx, "ok", "a//b", 1); return err }, wire.ErrInvalidPayload},
		{"leading slash", func() error { _, _, err := s.Set(ctx, "ok", "/a", 1); return err }, wire.ErrInvalidPayload},
		{"control char key", func() error { _, _, err := s.Set(ctx, "ok", "a\nb", 1); return err }, wire.ErrInvalidPayload},
		{"NaN value", func() error { _, _, err := s.Set(ctx, "ok", "k", math.NaN()); return err }, state.ErrInvalidValue},
		{"channel value", func() error { _, _, err := s.Set(ctx, "ok", "k", make(chan int)); return err }, state.ErrInvalidValue},
		{"oversized value", func() error { _, _, err := s.Set(ctx, "ok", "k", big); return err }, state.ErrValueTooLarge},
		{"oversized update", func() error {
			_, _, err := s.Update(ctx, "ok", "k", []state.Op{state.Append("s", big)})
			return err
		}, state.ErrValueTooLarge},
		// A set at a path nests a value deeper than itself: stored, it
		// read back as a string.
		{"update nested too deep", func() error {
			_, _, err := s.Update(ctx, "ok", "k", []state.Op{state.Set(strings.Repeat("p.", 25)+"p", nested(9980))})
			return err
		}, state.ErrInvalidValue},
		{"set nested too deep", func() error { _, _, err := s.Set(ctx, "ok", "k", nested(9998)); return err }, state.ErrInvalidValue},
		{"increment string", func() error {
			_, _, err := s.Update(ctx, "ok", "k", []state.Op{state.Increment("s", 1)})
			return err
		}, state.ErrInvalidOp},
		{"update bad scope", func() error {
			_, _, err := s.Update(ctx, "a.b", "k", []state.Op{state.Increment("s", 1)})
			return err
		}, wire.ErrInvalidPayload},
		{"delete bad key", func() error { _, err := s.Delete(ctx, "ok", "a/"); return err }, wire.ErrInvalidPayload},
		{"get bad scope", func() error { _, _, err := s.Get(ctx, "*", "k"); return err }, wire.ErrInvalidPayload},
		{"list bad scope", func() error { _, err := s.List(ctx, "a.b", ""); return err }, wire.ErrInvalidPayload},
		{"list bad prefix", func() error { _, err := s.List(ctx, "ok", "a//"); return err }, wire.ErrInvalidPayload},
	}
	before := v.msgs(t)
	for _, tt := range tests {
		err := tt.call()
		if !errors.Is(err, tt.want) || !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("%s: err = %v, want %v (invalid_payload)", tt.name, err, tt.want)
		}
	}
	if after := v.msgs(t); after != before {
		t.Fatalf("bad input wrote %d messages", after-before)
	}
	if got, _, _ := s.Get(ctx, "ok", "k"); toJSON(t, got) != `{"s":"x"}` {
		t.Fatalf("value changed: %v", got)
	}
	// Just under the limit is fine.
	fits := strings.Repeat("x", s.MaxValueSize()-2)
	if _, _, err := s.Set(ctx, "ok", "big", fits); err != nil {
		t.Fatalf("value at the limit: %v", err)
	}
	// Just as deep as allowed is fine, and reads back as it was written.
	if _, _, err := s.Update(ctx, "ok", "deep", []state.Op{state.Set("p", nested(9996))}); err != nil {
		t.Fatalf("value nested at the limit: %v", err)
	}
	if got, _, err := s.Get(ctx, "ok", "deep"); err != nil {
		t.Fatal(err)
	} else if _, ok := got.(map[string]any); !ok {
		t.Fatalf("value nested at the limit reads back as %T", got)
	}
}

func TestStoreOptions(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	for i, opt := range []state.Option{
		state.WithHistory(0), state.WithHistory(65), state.WithMaxRetries(0), state.WithMaxValueSize(0),
		state.WithTimeout(0), state.WithBucket("a.b"),
	} {
		if _, err := state.New(testCtx(t), e, opt); err == nil {
			t.Errorf("option %d accepted", i)
		}
	}
	s, err := state.New(testCtx(t), e, state.WithBucket("custom"), state.WithHistory(3), state.WithMaxValueSize(10))
	if err != nil {
		t.Fatal(err)
	}
	if s.Bucket() != "custom" || s.MaxValueSize() != 10 {
		t.Fatalf("bucket %q max %d", s.Bucket(), s.MaxValueSize())
	}
	st, err := s.KeyValue().Status(testCtx(t))
	if err != nil || st.History() != 3 {
		t.Fatalf("history = %v, %v", st, err)
	}
	if _, _, err := s.Set(testCtx(t), "x", "y", strings.Repeat("a", 20)); !errors.Is(err, state.ErrValueTooLarge) {
		t.Fatalf("WithMaxValueSize not enforced: %v", err)
	}
}

func TestStoreGetInto(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	ctx := testCtx(t)
	type order struct {
		ID    string `json:"id"`
		Cents int64  `json:"cents"`
	}
	if _, _, err := v.store.Set(ctx, "orders", "o/1", order{ID: "o1", Cents: 1<<60 + 1}); err != nil {
		t.Fatal(err)
	}
	var got order
	rev, err := v.store.GetInto(ctx, "orders", "o/1", &got)
	if err != nil || rev != 1 || got != (order{ID: "o1", Cents: 1<<60 + 1}) {
		t.Fatalf("GetInto = %+v, %d, %v", got, rev, err)
	}
	if _, err := v.store.GetInto(ctx, "orders", "missing", &got); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("GetInto missing = %v", err)
	}
	var wrong []int
	if _, err := v.store.GetInto(ctx, "orders", "o/1", &wrong); !errors.Is(err, wire.ErrInvalidPayload) {
		t.Fatalf("GetInto wrong type = %v", err)
	}
}
