package approval

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// bucketCopy binds the copy of bucket homed in region ("" the primary).
func bucketCopy(t testing.TB, e *engine.Engine, bucket, region string) jetstream.KeyValue {
	t.Helper()
	kv, err := e.JetStream().KeyValue(context.Background(), subjects.RegionalBucket(bucket, region))
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// keys is the sorted key list of kv (none: empty).
func keys(t testing.TB, kv jetstream.KeyValue) []string {
	t.Helper()
	lister, err := kv.ListKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for k := range lister.Keys() {
		out = append(out, k)
	}
	return out
}

// A session "<region>.<name>" keeps its approvals and settings in the
// region's bucket copies, a plain session in the primary ones; both are
// listed, read and resolved side by side. A region with no copy is
// not_found and nothing is written.
func TestRegionalSessions(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns, engine.WithRegion("eu"))
	w := NewWorker(WithClock(func() time.Time { return testNow }))
	if err := w.Start(ctx, e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
	primary := bucketCopy(t, e, subjects.ApprovalsBucket, "")
	eu := bucketCopy(t, e, subjects.ApprovalsBucket, "eu")
	primarySettings := bucketCopy(t, e, subjects.ApprovalSettingsBucket, "")
	euSettings := bucketCopy(t, e, subjects.ApprovalSettingsBucket, "eu")

	// The orchestrator parks each call in its session's copy; two strays
	// sit in the wrong copy (no resolve could find them) and are not listed.
	euKey, _ := park(t, eu, record(t, "eu.s1", "c1", "fs::write", map[string]any{"path": "/a"}, 200))
	plainKey, _ := park(t, primary, record(t, "s2", "c1", "fs::read", nil, 100))
	park(t, primary, record(t, "eu.s9", "c1", "x::y", nil, 1))
	park(t, eu, record(t, "s9", "c1", "x::y", nil, 1))
	if euKey != "eu.s1.c1" || plainKey != "s2.c1" {
		t.Fatalf("keys %q %q", euKey, plainKey)
	}

	list := func(sid string) string {
		t.Helper()
		p := listPendingOn(t, e, sid)
		return mustJSON(t, ids(p))
	}
	for _, tc := range []struct{ sid, want string }{
		{"", `["s2/c1","eu.s1/c1"]`},
		{"eu.s1", `["eu.s1/c1"]`},
		{"s2", `["s2/c1"]`},
		{"eu.s2", `[]`},
		{"eu.s9", `[]`},
		{"s9", `[]`},
	} {
		if got := list(tc.sid); got != tc.want {
			t.Errorf("list_pending(%q) = %s, want %s", tc.sid, got, tc.want)
		}
	}

	// Settings: each session's key in its own copy.
	for _, tc := range []struct {
		sid  string
		mode agent.ApprovalMode
	}{{"eu.s1", agent.ApprovalAuto}, {"s2", agent.ApprovalFull}} {
		mode := tc.mode
		if _, err := engine.Call[agent.ApprovalSettings](ctx, e, SettingsSetFunction, SettingsSetRequest{SessionID: tc.sid, Mode: &mode}); err != nil {
			t.Fatalf("set %s: %v", tc.sid, err)
		}
		got, err := engine.Call[agent.ApprovalSettings](ctx, e, SettingsGetFunction, SettingsGetRequest{SessionID: tc.sid})
		if err != nil || got.SessionID != tc.sid || got.Mode != tc.mode {
			t.Fatalf("get %s = %+v, %v", tc.sid, got, err)
		}
	}
	if g, p := mustJSON(t, keys(t, euSettings)), mustJSON(t, keys(t, primarySettings)); g != `["eu.s1"]` || p != `["s2"]` {
		t.Fatalf("settings keys: eu %s, primary %s", g, p)
	}

	// Resolve: each decision lands in its session's copy only.
	if err := resolve(ctx, e, ResolveRequest{SessionID: "eu.s1", FunctionCallID: "c1", Decision: "allow"}); err != nil {
		t.Fatal(err)
	}
	if rec, _, _ := stored(t, eu, euKey); rec.Decision != "allow" {
		t.Fatalf("eu record %+v", rec)
	}
	if rec, _, _ := stored(t, primary, plainKey); rec.Status != agent.ApprovalPending {
		t.Fatalf("plain record decided by the eu session's resolve: %+v", rec)
	}
	if got := list(""); got != `["s2/c1"]` {
		t.Fatalf("after resolving eu.s1: %s", got)
	}
	if err := resolve(ctx, e, ResolveRequest{SessionID: "s2", FunctionCallID: "c1", Decision: "deny"}); err != nil {
		t.Fatal(err)
	}
	if rec, _, _ := stored(t, primary, plainKey); rec.Decision != "deny" {
		t.Fatalf("plain record %+v", rec)
	}
	// Each decision's receipt sits in its session's copy too.
	if g, p := mustJSON(t, keys(t, bucketCopy(t, e, DecisionsBucket, "eu"))), mustJSON(t, keys(t, bucketCopy(t, e, DecisionsBucket, ""))); g != `["eu.s1.c1"]` || p != `["s2.c1"]` {
		t.Fatalf("receipt keys: eu %s, primary %s", g, p)
	}
	// The stray "eu.s9" in the primary copy is not where eu.s9 lives.
	if err := resolve(ctx, e, ResolveRequest{SessionID: "eu.s9", FunctionCallID: "c1", Decision: "allow"}); !errors.Is(err, wire.ErrNotPending) {
		t.Fatalf("resolve of a stray: %v", err)
	}

	// A region with no copy: not_found, over the bus and in process,
	// and nothing written anywhere.
	before := []uint64{values(t, primary), values(t, eu), values(t, primarySettings), values(t, euSettings)}
	full := agent.ApprovalFull
	s := w.Store()
	for name, call := range map[string]func() (error, error){
		"resolve": func() (error, error) {
			req := ResolveRequest{SessionID: "zz.s3", FunctionCallID: "c1", Decision: "allow"}
			return resolve(ctx, e, req), resolveIn(ctx, s, req)
		},
		"list_pending": func() (error, error) {
			_, err := engine.Call[ListPendingResponse](ctx, e, ListPendingFunction, ListPendingRequest{SessionID: "zz.s3"})
			_, serr := s.ListPending(ctx, "zz.s3")
			return err, serr
		},
		"settings::get": func() (error, error) {
			_, err := engine.Call[agent.ApprovalSettings](ctx, e, SettingsGetFunction, SettingsGetRequest{SessionID: "zz.s3"})
			_, serr := s.Settings(ctx, "zz.s3")
			return err, serr
		},
		"settings::set": func() (error, error) {
			req := SettingsSetRequest{SessionID: "zz.s3", Mode: &full}
			_, err := engine.Call[agent.ApprovalSettings](ctx, e, SettingsSetFunction, req)
			_, serr := s.SetSettings(ctx, req)
			return err, serr
		},
	} {
		err, serr := call()
		if !errors.Is(err, wire.ErrNotFound) {
			t.Errorf("%s over the bus: %v, want not_found", name, err)
		}
		if !errors.Is(serr, engine.ErrUnknownRegion) || wire.From(serr).Code != wire.CodeNotFound {
			t.Errorf("%s in process: %v, want not_found wrapping ErrUnknownRegion", name, serr)
		}
	}
	after := []uint64{values(t, primary), values(t, eu), values(t, primarySettings), values(t, euSettings)}
	if mustJSON(t, before) != mustJSON(t, after) {
		t.Errorf("values %v became %v", before, after)
	}
	for _, b := range []string{subjects.ApprovalsBucket, subjects.ApprovalSettingsBucket} {
		if _, err := e.JetStream().KeyValue(ctx, subjects.RegionalBucket(b, "zz")); !errors.Is(err, jetstream.ErrBucketNotFound) {
			t.Errorf("bucket %s: %v", subjects.RegionalBucket(b, "zz"), err)
		}
	}

	// A node outside the region (no WithRegion) creates no eu copy but
	// still lists and resolves across every copy there is.
	e2 := enginetest.NewEngine(t, ns)
	s2, err := Open(ctx, e2, WithClock(func() time.Time { return testNow }))
	if err != nil {
		t.Fatal(err)
	}
	park(t, eu, record(t, "eu.s4", "c2", "x::y", nil, 5))
	got, err := s2.ListPending(ctx, "")
	if err != nil || mustJSON(t, ids(got)) != `["eu.s4/c2"]` {
		t.Fatalf("list from a plain node: %v, %v", ids(got), err)
	}
	if err := resolveIn(ctx, s2, ResolveRequest{SessionID: "eu.s4", FunctionCallID: "c2", Decision: "allow"}); err != nil {
		t.Fatalf("resolve from a plain node: %v", err)
	}
}

func listPendingOn(t *testing.T, e *engine.Engine, sid string) []Pending {
	t.Helper()
	resp, err := engine.Call[ListPendingResponse](context.Background(), e, ListPendingFunction, ListPendingRequest{SessionID: sid})
	if err != nil {
		t.Fatalf("list_pending(%q): %v", sid, err)
	}
	if resp.Pending == nil {
		t.Fatal("pending is nil")
	}
	return resp.Pending
}

// splitKey reads a key of one bucket copy: the session id takes the region
// token in a region's copy, and keys of the other copies' shapes are refused.
func TestSplitKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		region, key string
		sid, callID string // "" for an error
	}{
		{"", "s1.toolu_01", "s1", "toolu_01"},
		{"", "s1.c=3A1", "s1", "c:1"},
		{"", "s1.a=2Eb", "", ""}, // call "a.b" has no key
		{"", "s1.x.y", "", ""},   // would be call "x/y"
		{"", "eu.s1.c1", "", ""}, // a regional key in the primary copy
		{"", "s1", "", ""},       // no call
		{"", "s1.=zz", "", ""},   // bad escape
		{"eu", "eu.s1.c1", "eu.s1", "c1"},
		{"eu", "eu.s1.c=3A1", "eu.s1", "c:1"},
		{"eu", "eu.s1.x.y", "", ""}, // would be call "x/y"
		{"eu", "s1.c1", "", ""},     // a plain key in the eu copy
		{"eu", "us.s1.c1", "", ""},  // another region's session
		{"eu", "eu.s1", "", ""},     // no call
		{"eu", "eu..c1", "", ""},    // no name
		{"eu", "eu-x.s1.c1", "", ""},
	}
	for _, tc := range tests {
		sid, callID, err := splitKey(tc.region, tc.key)
		if tc.sid == "" {
			if err == nil {
				t.Errorf("splitKey(%q, %q) = %q %q, want an error", tc.region, tc.key, sid, callID)
			}
			continue
		}
		if err != nil || sid != tc.sid || callID != tc.callID {
			t.Errorf("splitKey(%q, %q) = %q %q %v, want %q %q", tc.region, tc.key, sid, callID, err, tc.sid, tc.callID)
			continue
		}
		if back, err := subjects.ApprovalKey(sid, callID); err != nil || back != tc.key {
			t.Errorf("ApprovalKey(%q, %q) = %q %v, want %q", sid, callID, back, err, tc.key)
		}
	}
}
