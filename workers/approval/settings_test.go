package approval

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

func TestSettings(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	get := func() agent.ApprovalSettings {
		t.Helper()
		st, err := engine.Call[agent.ApprovalSettings](ctx, f.e, SettingsGetFunction, SettingsGetRequest{SessionID: "s1"})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	set := func(r SettingsSetRequest) agent.ApprovalSettings {
		t.Helper()
		r.SessionID = "s1"
		st, err := engine.Call[agent.ApprovalSettings](ctx, f.e, SettingsSetFunction, r)
		if err != nil {
			t.Fatal(err)
		}
		if g, stored := mustJSON(t, st), mustJSON(t, get()); g != stored {
			t.Fatalf("set answered %s, get reads %s", g, stored)
		}
		return st
	}
	mode := func(m agent.ApprovalMode) *agent.ApprovalMode { return &m }
	list := func(p ...string) *[]string { return &p }
	empty := []string{} // list() would point at a nil slice, which encodes as null: keep
	ms := testNow.UnixMilli()

	steps := []struct {
		name string
		req  *SettingsSetRequest // nil: a get
		want string
	}{
		{"default", nil, `{"session_id":"s1","mode":"manual","always_allow":[]}`},
		{"mode only", &SettingsSetRequest{Mode: mode(agent.ApprovalAuto)}, fmt.Sprintf(`{"session_id":"s1","mode":"auto","always_allow":[],"updated_at":%d}`, ms)},
		{"list only, deduped in order", &SettingsSetRequest{AlwaysAllow: list("git::*", "fs::read", "git::*", "fs::read", "a::b")},
			fmt.Sprintf(`{"session_id":"s1","mode":"auto","always_allow":["git::*","fs::read","a::b"],"updated_at":%d}`, ms)},
		{"mode keeps the list", &SettingsSetRequest{Mode: mode(agent.ApprovalFull)}, fmt.Sprintf(`{"session_id":"s1","mode":"full","always_allow":["git::*","fs::read","a::b"],"updated_at":%d}`, ms)},
		{"nothing given keeps both", &SettingsSetRequest{}, fmt.Sprintf(`{"session_id":"s1","mode":"full","always_allow":["git::*","fs::read","a::b"],"updated_at":%d}`, ms)},
		{"both", &SettingsSetRequest{Mode: mode(agent.ApprovalManual), AlwaysAllow: list("fs::*")}, fmt.Sprintf(`{"session_id":"s1","mode":"manual","always_allow":["fs::*"],"updated_at":%d}`, ms)},
		{"empty list clears", &SettingsSetRequest{AlwaysAllow: &empty}, fmt.Sprintf(`{"session_id":"s1","mode":"manual","always_allow":[],"updated_at":%d}`, ms)},
	}
	for _, s := range steps {
		var got agent.ApprovalSettings
		if s.req == nil {
			got = get()
		} else {
			got = set(*s.req)
		}
		if g := mustJSON(t, got); g != s.want {
			t.Fatalf("%s:\n got %s\nwant %s", s.name, g, s.want)
		}
	}
	// Another session is untouched.
	st, err := engine.Call[agent.ApprovalSettings](ctx, f.e, SettingsGetFunction, SettingsGetRequest{SessionID: "s2"})
	if err != nil || st.Mode != agent.ApprovalManual || len(st.AlwaysAllow) != 0 || st.SessionID != "s2" {
		t.Fatalf("s2: %+v, %v", st, err)
	}

	// JSON from a plain client: null and absent keep, [] clears.
	nc := enginetest.Connect(t, f.ns)
	for _, tc := range []struct{ body, want string }{
		{`{"session_id":"s1","mode":"auto","always_allow":["x::y"]}`, `"mode":"auto","always_allow":["x::y"]`},
		{`{"session_id":"s1","mode":null}`, `"mode":"auto","always_allow":["x::y"]`},
		{`{"session_id":"s1","always_allow":null,"mode":"full"}`, `"mode":"full","always_allow":["x::y"]`},
		{`{"session_id":"s1","always_allow":[]}`, `"mode":"full","always_allow":[]`},
	} {
		m, err := nc.Request(subjects.MustFunctionSubject(SettingsSetFunction), []byte(tc.body), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if we := wire.Decode(m); we != nil {
			t.Fatalf("%s: %v", tc.body, we)
		}
		if want := `{"session_id":"s1",` + tc.want + fmt.Sprintf(`,"updated_at":%d}`, ms); string(m.Data) != want {
			t.Fatalf("%s:\n got %s\nwant %s", tc.body, m.Data, want)
		}
	}
	for _, body := range []string{`{"session_id":"s1","mode":5}`, `{"session_id":"s1","always_allow":"fs::read"}`, `{"session_id":"s1","always_allow":["*"]}`, `[]`} {
		m, err := nc.Request(subjects.MustFunctionSubject(SettingsSetFunction), []byte(body), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if we := wire.Decode(m); !errors.Is(we, wire.ErrInvalidPayload) {
			t.Errorf("%s: %v, want invalid_payload", body, we)
		}
	}
}

func TestSettingsStoredValues(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	for i, tc := range []struct {
		stored string
		want   string // "" means an internal error
	}{
		{`{"mode":"auto"}`, `{"session_id":"k0","mode":"auto","always_allow":[]}`},
		{`{"session_id":"other","always_allow":["a::b"]}`, `{"session_id":"k1","mode":"manual","always_allow":["a::b"]}`},
		{`not json`, ""},
		{`{"mode":"yolo"}`, ""},
		// A pattern that no longer validates is left out, the rest kept.
		{`{"mode":"auto","always_allow":["*"]}`, `{"session_id":"k4","mode":"auto","always_allow":[]}`},
		{`{"mode":"full","always_allow":["fs::read","**","a b","git::*"]}`, `{"session_id":"k5","mode":"full","always_allow":["fs::read","git::*"]}`},
	} {
		sid := fmt.Sprintf("k%d", i)
		if _, err := f.settings.Put(ctx, sid, []byte(tc.stored)); err != nil {
			t.Fatal(err)
		}
		st, err := engine.Call[agent.ApprovalSettings](ctx, f.e, SettingsGetFunction, SettingsGetRequest{SessionID: sid})
		if tc.want == "" {
			if !errors.Is(err, wire.ErrInternal) {
				t.Errorf("%s: %+v, %v; want internal", tc.stored, st, err)
			}
			// A human can still fix it with a set.
			m := agent.ApprovalAuto
			st, err = engine.Call[agent.ApprovalSettings](ctx, f.e, SettingsSetFunction, SettingsSetRequest{SessionID: sid, Mode: &m})
			if err != nil || st.Mode != agent.ApprovalAuto || len(st.AlwaysAllow) != 0 {
				t.Errorf("%s: set over it: %+v, %v", tc.stored, st, err)
			}
			continue
		}
		if err != nil || mustJSON(t, st) != tc.want {
			t.Errorf("%s: %s, %v; want %s", tc.stored, mustJSON(t, st), err, tc.want)
		}
	}
	// A deleted key reads as the default and can be set again.
	if err := f.settings.Delete(ctx, "k0"); err != nil {
		t.Fatal(err)
	}
	if st, err := f.w.Store().Settings(ctx, "k0"); err != nil || st.Mode != agent.ApprovalManual {
		t.Fatalf("deleted: %+v, %v", st, err)
	}
	m := agent.ApprovalFull
	if st, err := f.w.Store().SetSettings(ctx, SettingsSetRequest{SessionID: "k0", Mode: &m}); err != nil || st.Mode != agent.ApprovalFull {
		t.Fatalf("set after delete: %+v, %v", st, err)
	}
}

// TestSettingsStoredAllStar: settings stored before always_allow refused
// every all-'*' pattern, with "**" among their patterns, are read without
// it (logged once per stored value), so settings::get answers; a set
// over them keeps the other patterns and writes the list back without it;
// a set with it is still refused.
func TestSettingsStoredAllStar(t *testing.T) {
	t.Parallel()
	var logs enginetest.Buffer
	f := newFixture(t, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	ctx := context.Background()
	const warning = "stored always_allow patterns no longer valid"
	// Written by hand, as approval::settings::set wrote it before.
	if _, err := f.settings.Put(ctx, "s1", []byte(`{"session_id":"s1","mode":"auto","always_allow":["fs::read","**"],"updated_at":1}`)); err != nil {
		t.Fatal(err)
	}
	get := func() string {
		t.Helper()
		st, err := engine.Call[agent.ApprovalSettings](ctx, f.e, SettingsGetFunction, SettingsGetRequest{SessionID: "s1"})
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		return mustJSON(t, st)
	}
	for range 3 {
		if got, want := get(), `{"session_id":"s1","mode":"auto","always_allow":["fs::read"],"updated_at":1}`; got != want {
			t.Fatalf("get:\n got %s\nwant %s", got, want)
		}
	}
	if n := strings.Count(logs.String(), warning); n != 1 {
		t.Errorf("%d warnings for one stored value, want 1:\n%s", n, logs.String())
	}

	// A set with "**" is refused; one over the stored value keeps the
	// valid patterns.
	list := []string{"**"}
	if _, err := engine.Call[agent.ApprovalSettings](ctx, f.e, SettingsSetFunction, SettingsSetRequest{SessionID: "s1", AlwaysAllow: &list}); !errors.Is(err, wire.ErrInvalidPayload) {
		t.Errorf("set always_allow [\"**\"]: %v, want invalid_payload", err)
	}
	m := agent.ApprovalManual
	if _, err := engine.Call[agent.ApprovalSettings](ctx, f.e, SettingsSetFunction, SettingsSetRequest{SessionID: "s1", Mode: &m}); err != nil {
		t.Fatalf("set mode: %v", err)
	}
	ent, err := f.settings.Get(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(ent.Value()), fmt.Sprintf(`{"session_id":"s1","mode":"manual","always_allow":["fs::read"],"updated_at":%d}`, testNow.UnixMilli()); got != want {
		t.Errorf("stored after set:\n got %s\nwant %s", got, want)
	}
}

// Concurrent partial writes all land: each retries its compare-and-set on
// the value the others left, so neither field is lost.
func TestSettingsConcurrentSet(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	store := f.w.Store()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			var r SettingsSetRequest
			if g == 0 {
				m := agent.ApprovalAuto
				r = SettingsSetRequest{SessionID: "s1", Mode: &m}
			} else {
				l := []string{fmt.Sprintf("f%d::x", g)}
				r = SettingsSetRequest{SessionID: "s1", AlwaysAllow: &l}
			}
			if _, err := store.SetSettings(ctx, r); err != nil {
				t.Errorf("writer %d: %v", g, err)
			}
		})
	}
	wg.Wait()
	st, err := store.Settings(ctx, "s1")
	if err != nil || st.Mode != agent.ApprovalAuto || len(st.AlwaysAllow) != 1 {
		t.Fatalf("after concurrent writes: %+v, %v", st, err)
	}
}
