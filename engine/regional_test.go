package engine_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

func TestSessionStores(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := enginetest.RunServer(t)
	// An older version's primary stream, with a ">" filter.
	old := enginetest.NewEngine(t, ns)
	cfg := jetstream.StreamConfig{Name: "T_EVENTS", Subjects: []string{"t.ev.>"}, Storage: jetstream.MemoryStorage}
	if _, err := old.JetStream().CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	e := enginetest.NewEngine(t, ns, engine.WithRegion("eu"))
	if e.Region() != "eu" {
		t.Fatalf("Region() = %q", e.Region())
	}
	if _, err := e.EnsureSessionStream(ctx, cfg, "t.ev."); err != nil {
		t.Fatal(err)
	}
	if _, err := e.EnsureSessionKV(ctx, jetstream.KeyValueConfig{Bucket: "t-state", Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	js := e.JetStream()
	for _, c := range []struct{ name, subject string }{{"T_EVENTS", "t.ev.*"}, {"T_EVENTS_AT_eu", "t.ev.eu.*"}} {
		s, err := js.Stream(ctx, c.name)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().Config.Subjects; !slices.Equal(got, []string{c.subject}) {
			t.Errorf("%s subjects = %v, want [%s]", c.name, got, c.subject)
		}
	}
	for _, subj := range []string{"t.ev.plain", "t.ev.eu.homed"} {
		if _, err := js.Publish(ctx, subj, []byte("x")); err != nil {
			t.Fatalf("publish %s: %v", subj, err)
		}
	}
	tests := []struct {
		sid, stream, bucket string
		unknown             bool
	}{
		{sid: "plain", stream: "T_EVENTS", bucket: "t-state"},
		{sid: "eu.homed", stream: "T_EVENTS_AT_eu", bucket: "t-state-at-eu"},
		{sid: "us.nowhere", unknown: true},
	}
	for _, tt := range tests {
		t.Run(tt.sid, func(t *testing.T) {
			s, err := e.SessionStream(ctx, "T_EVENTS", tt.sid)
			kv, kerr := e.SessionKV(ctx, "t-state", tt.sid)
			if tt.unknown {
				for _, err := range []error{err, kerr} {
					if !errors.Is(err, engine.ErrUnknownRegion) || wire.From(err).Code != wire.CodeNotFound {
						t.Errorf("err = %v, want not_found wrapping ErrUnknownRegion", err)
					}
				}
				return
			}
			if err != nil || kerr != nil {
				t.Fatal(err, kerr)
			}
			if s.CachedInfo().Config.Name != tt.stream || kv.Bucket() != tt.bucket {
				t.Errorf("got %s / %s, want %s / %s", s.CachedInfo().Config.Name, kv.Bucket(), tt.stream, tt.bucket)
			}
			info, err := s.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.State.Msgs != 1 {
				t.Errorf("%s holds %d messages, want its session's one", tt.stream, info.State.Msgs)
			}
		})
	}
	if kv, err := e.RegionKV(ctx, "t-state", "eu"); err != nil || kv.Bucket() != "t-state-at-eu" {
		t.Errorf("RegionKV(eu) = %v, %v", kv, err)
	}
	if _, err := e.RegionKV(ctx, "t-state", "us"); !errors.Is(err, engine.ErrUnknownRegion) || wire.From(err).Code != wire.CodeNotFound {
		t.Errorf("RegionKV(us): %v", err)
	}
	for _, c := range []struct{ stream string }{{"T_EVENTS"}, {"KV_t-state"}} {
		rs, err := e.SessionRegions(ctx, c.stream)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(rs, []string{"", "eu"}) {
			t.Errorf("SessionRegions(%s) = %q", c.stream, rs)
		}
	}
	if _, err := enginetest.NewEngine(t, ns).JetStream().Stream(ctx, "T_EVENTS_AT_eu"); err != nil {
		t.Fatal(err)
	}
}

func TestWithRegionRejectsBadNames(t *testing.T) {
	for _, r := range []string{"", "a.b", "a b", "*"} {
		if _, err := engine.New(nil, engine.WithRegion(r)); !errors.Is(err, engine.ErrInvalidOption) {
			t.Errorf("WithRegion(%q): err = %v", r, err)
		}
	}
}
