package orchestrator_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/orchestrator"
)

// TestSessionHomes runs a session homed in region eu ("eu.s1") beside a
// plain one ("s2") on a node of region eu: each one's turn record, events,
// steps and transcript land in its own copy of the stores, and a session of
// a region without stores is refused with nothing written.
func TestSessionHomes(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStackOn(t, enginetest.NewEngine(t, ns, engine.WithRegion("eu")), allowAll, nil)
	ctx := context.Background()
	for _, sid := range []string{"eu.s1", "s2"} {
		var res orchestrator.RunStartResult
		err := s.e.Trigger(ctx, "run::start", agent.RunStart{
			SessionID: sid, Provider: "scripted", Model: "echo",
			Messages: []agent.Message{userText(`/call math::add {"a":2,"b":3}`)},
		}, &res)
		if err != nil || !res.Started {
			t.Fatalf("run::start %s = %+v, %v", sid, res, err)
		}
		evs := events(t, s.e, sid, 20*time.Second)
		if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd {
			t.Fatalf("%s: agent_end stop_reason %q: %s", sid, last.StopReason, strings.Join(types(evs), " "))
		}
		var view *agent.TurnView
		if err := s.e.Trigger(ctx, "turn::get_state", map[string]string{"session_id": sid}, &view); err != nil || view == nil || view.State != agent.StateStopped {
			t.Fatalf("turn::get_state %s = %+v, %v", sid, view, err)
		}
	}
	js := s.e.JetStream()
	// Where each session's data is: stream → subject → messages wanted.
	streams := []struct {
		stream, subject string
		want            bool
	}{
		{"III_EVENTS_AT_eu", "iii.events.eu.s1", true},
		{"III_EVENTS", "iii.events.s2", true},
		{"III_SESSION_ENTRIES_AT_eu", "iii.session.entries.eu.s1", true},
		{"III_SESSION_ENTRIES", "iii.session.entries.s2", true},
		{"KV_iii-turn-state-at-eu", "$KV.iii-turn-state-at-eu.eu.s1", true},
		{"KV_iii-turn-state", "$KV.iii-turn-state.s2", true},
		{"KV_iii-sessions-at-eu", "$KV.iii-sessions-at-eu.eu.s1", true},
	}
	for _, c := range streams {
		st, err := js.Stream(ctx, c.stream)
		if err != nil {
			t.Fatalf("stream %s: %v", c.stream, err)
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
		if err != nil {
			t.Fatal(err)
		}
		if got := info.State.Subjects[c.subject] > 0; got != c.want {
			t.Errorf("%s holds %s: %v, want %v (subjects %v)", c.stream, c.subject, got, c.want, info.State.Subjects)
		}
		for subj := range info.State.Subjects {
			regional := strings.Contains(subj, "eu.s1")
			if regional != strings.Contains(c.stream, "_AT_eu") && regional != strings.Contains(c.stream, "-at-eu") {
				t.Errorf("%s holds %s: a session of the other home", c.stream, subj)
			}
		}
	}
	// A region nobody runs: refused, coded, nothing written anywhere.
	err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: "zz.s3", Provider: "scripted", Model: "echo", Messages: []agent.Message{userText("hi")}}, nil)
	if !errors.Is(err, wire.ErrNotFound) || !strings.Contains(err.Error(), `region "zz"`) {
		t.Fatalf("run::start zz.s3: err = %v, want not_found naming the region", err)
	}
	for _, stream := range []string{"III_EVENTS", "III_EVENTS_AT_eu", "KV_iii-turn-state", "KV_iii-turn-state-at-eu", "III_SESSION_ENTRIES", "KV_iii-sessions"} {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
		if err != nil {
			t.Fatal(err)
		}
		for subj := range info.State.Subjects {
			if strings.Contains(subj, "zz") {
				t.Errorf("%s holds %s after a refused start", stream, subj)
			}
		}
	}
	// The other functions of a session refuse it the same way: not_found,
	// not a retryable unavailable (turn::get_state and run::abort answered
	// that).
	for _, fn := range []string{"turn::get_state", "run::abort", "session::inbox_push", "session::inbox_drain"} {
		req := map[string]any{"session_id": "zz.s3", "name": orchestrator.InboxSteering, "item": userText("hi")}
		if err := s.e.Trigger(ctx, fn, req, nil); !errors.Is(err, wire.ErrNotFound) {
			t.Errorf("%s of zz.s3: err = %v, want not_found", fn, err)
		}
	}
}
