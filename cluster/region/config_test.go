package region_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/cluster/region"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/nats-io/nats.go/jetstream"
)

func TestDefaultFilter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		stream string
		want   bool
	}{
		{"KV_iii-turn-state", true},
		{"KV_iii-state", true},
		{"III_EVENTS", true},
		{"III_TURN_STEPS", true}, // selected by name; its retention decides
		{"KV_other", false},
		{"KV_iii", false},
		{"kv_iii-x", false},
		{"III", false},
		{"iii_EVENTS", false},
		{"OBJ_iii-x", false},
		{"", false},
	} {
		if got := region.DefaultFilter(tc.stream); got != tc.want {
			t.Errorf("DefaultFilter(%q) = %v, want %v", tc.stream, got, tc.want)
		}
	}
}

func TestSelectOrigin(t *testing.T) {
	t.Parallel()
	only := func(name string) func(string) bool { return func(s string) bool { return s == name } }
	for _, tc := range []struct {
		name        string
		cfg         jetstream.StreamConfig
		filter      func(string) bool
		ok          bool
		placeholder bool
	}{
		{"kv bucket", jetstream.StreamConfig{Name: "KV_iii-turn-state"}, region.DefaultFilter, true, false},
		{"limits stream", jetstream.StreamConfig{Name: "III_EVENTS"}, region.DefaultFilter, true, false},
		{"interest stream", jetstream.StreamConfig{Name: "III_TOPIC", Retention: jetstream.InterestPolicy}, region.DefaultFilter, true, false},
		{"work queue", jetstream.StreamConfig{Name: "III_TURN_STEPS", Retention: jetstream.WorkQueuePolicy}, region.DefaultFilter, true, true},
		{"counters", jetstream.StreamConfig{Name: "III_COUNT", AllowMsgCounter: true}, region.DefaultFilter, true, true},
		{"not ours", jetstream.StreamConfig{Name: "ORDERS"}, region.DefaultFilter, false, false},
		{"custom filter", jetstream.StreamConfig{Name: "ORDERS"}, only("ORDERS"), true, false},
		{"custom filter drops iii", jetstream.StreamConfig{Name: "III_EVENTS"}, only("ORDERS"), false, false},
		{"a mirror", jetstream.StreamConfig{Name: "III_EVENTS_X", Mirror: &jetstream.StreamSource{Name: "III_EVENTS"}}, region.DefaultFilter, false, false},
		{"our promoted mirror", jetstream.StreamConfig{Name: "III_EVENTS_B", Metadata: map[string]string{region.MetaOrigin: "III_EVENTS"}}, region.DefaultFilter, false, false},
		{"a placeholder", jetstream.StreamConfig{Name: "III_TURN_STEPS_B", Metadata: map[string]string{region.MetaOrigin: "III_TURN_STEPS", region.MetaKind: region.KindPlaceholder}}, region.DefaultFilter, false, false},
	} {
		ok, reason := region.SelectOrigin(tc.cfg, tc.filter)
		if ok != tc.ok || (reason != "") != tc.placeholder {
			t.Errorf("%s: ok=%v reason=%q, want ok=%v placeholder=%v", tc.name, ok, reason, tc.ok, tc.placeholder)
		}
	}
}

// TestConfigs checks the configs a mirror, a copy and a re-homed origin
// get: what the server forbids on mirrors is off, and all of it comes back.
func TestConfigs(t *testing.T) {
	t.Parallel()
	origin := jetstream.StreamConfig{
		Name: "KV_iii-leases", Subjects: []string{"$KV.iii-leases.>"}, Retention: jetstream.InterestPolicy,
		MaxMsgsPerSubject: 1, AllowRollup: true, DenyDelete: true, AllowDirect: true, Duplicates: time.Minute,
		AllowMsgTTL: true, SubjectDeleteMarkerTTL: time.Second, AllowMsgSchedules: true, Replicas: 3,
		RePublish: &jetstream.RePublish{Source: ">", Destination: "re.>"},
		Placement: &jetstream.Placement{Cluster: "A", Tags: []string{"ssd"}},
		Metadata:  map[string]string{"owner": "orchestrator", "_nats.ver": "2.15.2", region.MetaTakenOver: "C"},
	}
	m, err := region.MirrorConfig(origin, "A", "B", 0, "")
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case m.Name != "KV_iii-leases_B", m.Mirror == nil || m.Mirror.Name != origin.Name, len(m.Subjects) != 0,
		!m.MirrorDirect, m.Retention != jetstream.LimitsPolicy, m.SubjectDeleteMarkerTTL != 0, m.AllowMsgSchedules,
		m.RePublish != nil, m.Duplicates != 0, m.Replicas != 3, m.Placement.Cluster != "B" || len(m.Placement.Tags) != 0,
		m.MaxMsgsPerSubject != 1 || !m.AllowMsgTTL || !m.DenyDelete:
		t.Errorf("mirror config: %+v", m)
	}
	md := m.Metadata
	if md["owner"] != "orchestrator" || md["_nats.ver"] != "" || md[region.MetaTakenOver] != "" ||
		md[region.MetaOrigin] != origin.Name || md[region.MetaHome] != "A" || md[region.MetaKind] != region.KindMirror || md[region.MetaSpec] == "" {
		t.Errorf("mirror metadata: %v", md)
	}
	var saved jetstream.StreamConfig
	if err := json.Unmarshal([]byte(md[region.MetaConfig]), &saved); err != nil || saved.SubjectDeleteMarkerTTL != time.Second || len(saved.Subjects) != 1 {
		t.Errorf("saved origin config: %+v, %v", saved, err)
	}
	// The digest is stable, and follows the origin and the options.
	again, _ := region.MirrorConfig(origin, "A", "B", 0, "")
	r1, _ := region.MirrorConfig(origin, "A", "B", 1, "")
	changed := origin
	changed.MaxAge = time.Hour
	c, _ := region.MirrorConfig(changed, "A", "B", 0, "")
	if again.Metadata[region.MetaSpec] != md[region.MetaSpec] || r1.Metadata[region.MetaSpec] == md[region.MetaSpec] ||
		c.Metadata[region.MetaSpec] == md[region.MetaSpec] || r1.Replicas != 1 {
		t.Errorf("spec digests: %s %s %s %s", md[region.MetaSpec], again.Metadata[region.MetaSpec], r1.Metadata[region.MetaSpec], c.Metadata[region.MetaSpec])
	}
	ph, err := region.MirrorConfig(origin, "A", "B", 1, "work queue")
	if err != nil || ph.Mirror != nil || ph.Metadata[region.MetaKind] != region.KindPlaceholder || ph.Storage != jetstream.MemoryStorage ||
		ph.Metadata[region.MetaConfig] != md[region.MetaConfig] || !strings.Contains(ph.Description, "work queue") {
		t.Errorf("placeholder: %+v, %v", ph, err)
	}

	final := region.FinalConfig(saved, "A", "B", 1)
	if final.Name != origin.Name || final.Mirror != nil || final.Placement.Cluster != "B" || final.Replicas != 1 ||
		final.Retention != jetstream.InterestPolicy || final.SubjectDeleteMarkerTTL != time.Second || !final.AllowDirect ||
		final.RePublish == nil || final.Metadata[region.MetaTakenOver] != "A" || final.Metadata["owner"] != "orchestrator" {
		t.Errorf("final config: %+v", final)
	}
	cp := region.CopyConfig(final, m.Name)
	if cp.Name != origin.Name || cp.Mirror == nil || cp.Mirror.Name != m.Name || len(cp.Subjects) != 0 || cp.AllowDirect ||
		cp.RePublish != nil || cp.SubjectDeleteMarkerTTL != 0 || cp.Retention != jetstream.LimitsPolicy || cp.AllowMsgSchedules {
		t.Errorf("copy config: %+v", cp)
	}
	if final.RePublish == nil || final.Subjects[0] != "$KV.iii-leases.>" {
		t.Errorf("copy changed final: %+v", final)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	js, err := jetstream.New(enginetest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 10*time.Second)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "iii-turn-state"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"mirror nil js", func() error { _, err := region.Mirror(ctx, nil, "B"); return err }, engine.ErrInvalidOption},
		{"lag nil js", func() error { _, err := region.Lag(ctx, nil, "B"); return err }, engine.ErrInvalidOption},
		{"takeover nil js", func() error { _, err := region.Takeover(ctx, nil, "A", "B"); return err }, engine.ErrInvalidOption},
		{"home nil js", func() error { _, err := region.Home(ctx, nil, "X"); return err }, engine.ErrInvalidOption},
		{"empty region", func() error { _, err := region.Mirror(ctx, js, ""); return err }, region.ErrInvalidRegion},
		{"dotted region", func() error { _, err := region.Mirror(ctx, js, "eu.west"); return err }, region.ErrInvalidRegion},
		{"spaced region", func() error { _, err := region.Lag(ctx, js, "eu west"); return err }, region.ErrInvalidRegion},
		{"long region", func() error { _, err := region.Lag(ctx, js, strings.Repeat("x", 65)); return err }, region.ErrInvalidRegion},
		{"bad lost region", func() error { _, err := region.Takeover(ctx, js, "a>", "B"); return err }, region.ErrInvalidRegion},
		{"lost is new home", func() error { _, err := region.Takeover(ctx, js, "B", "B"); return err }, region.ErrInvalidRegion},
		{"nil option", func() error { _, err := region.Mirror(ctx, js, "B", nil); return err }, engine.ErrInvalidOption},
		{"nil logger", func() error { _, err := region.Mirror(ctx, js, "B", region.WithLogger(nil)); return err }, engine.ErrInvalidOption},
		{"nil filter", func() error { _, err := region.Mirror(ctx, js, "B", region.WithFilter(nil)); return err }, engine.ErrInvalidOption},
		{"zero replicas", func() error { _, err := region.Mirror(ctx, js, "B", region.WithReplicas(0)); return err }, engine.ErrInvalidOption},
		{"six replicas", func() error { _, err := region.Takeover(ctx, js, "A", "B", region.WithReplicas(6)); return err }, engine.ErrInvalidOption},
		{"tiny probe", func() error { _, err := region.Takeover(ctx, js, "A", "B", region.WithProbeTimeout(0)); return err }, engine.ErrInvalidOption},
		{"no mirrors for lag", func() error { _, err := region.Lag(ctx, js, "B"); return err }, region.ErrNoMirrors},
		{"no mirrors for takeover", func() error { _, err := region.Takeover(ctx, js, "A", "B"); return err }, region.ErrNoMirrors},
		{"not clustered", func() error { _, err := region.Mirror(ctx, js, "B"); return err }, region.ErrNotClustered},
		{"unknown stream", func() error { _, err := region.Home(ctx, js, "NOPE"); return err }, jetstream.ErrStreamNotFound},
		{"home empty stream", func() error { _, err := region.Home(ctx, js, ""); return err }, engine.ErrInvalidOption},
		{"home dotted stream", func() error { _, err := region.Home(ctx, js, "KV.x"); return err }, engine.ErrInvalidOption},
		{"home wildcard stream", func() error { _, err := region.Home(ctx, js, "KV_*"); return err }, engine.ErrInvalidOption},
		{"home spaced stream", func() error { _, err := region.Home(ctx, js, "KV x"); return err }, engine.ErrInvalidOption},
	} {
		if err := tc.call(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// Nothing was created by the failed calls.
	n := 0
	for range js.StreamNames(ctx).Name() {
		n++
	}
	if n != 1 {
		t.Errorf("%d streams after bad input", n)
	}
}

func FuzzValidRegion(f *testing.F) {
	for _, s := range []string{"B", "eu-west_1", "", "a.b", "a b", "a*", ">", "é", strings.Repeat("x", 64)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, r string) {
		if region.ValidRegion(r) != nil {
			return
		}
		// A valid region makes valid stream and bucket names.
		name := region.MirrorName("KV_iii-turn-state", r)
		if strings.ContainsAny(name, ".*> \t\r\n/\\") || len(name) > 255 {
			t.Fatalf("region %q makes stream name %q", r, name)
		}
		for _, c := range strings.TrimPrefix(name, "KV_") {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
				t.Fatalf("region %q makes bucket name %q", r, name)
			}
		}
	})
}

func TestCopyOf(t *testing.T) {
	t.Parallel()
	names := []string{"KV_iii-runs", "KV_iii-runs_B", "EVENTS", "EVENTS_B", "_B", "LONE_B", "X_B_B", "X_B"}
	for _, tc := range []struct {
		name, region, origin string
		ok                   bool
	}{
		{"KV_iii-runs_B", "B", "KV_iii-runs", true},
		{"EVENTS_B", "B", "EVENTS", true},
		{"EVENTS_B", "W", "", false},    // another region's name
		{"KV_iii-runs", "B", "", false}, // an origin
		{"LONE_B", "B", "", false},      // no listed origin
		{"_B", "B", "", false},          // empty origin
		{"X_B_B", "B", "X_B", true},     // the longest suffix only
	} {
		origin, ok := region.CopyOf(names, tc.name, tc.region)
		if origin != tc.origin || ok != tc.ok {
			t.Errorf("copyOf(%q, %q) = %q, %v; want %q, %v", tc.name, tc.region, origin, ok, tc.origin, tc.ok)
		}
	}
}
