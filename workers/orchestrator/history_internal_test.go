package orchestrator

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// TestHistoryReadAsksAgain: a transcript read taken by a session-tree
// worker that never answers (its node died) is asked again once its
// attempt times out; an answer, an error included, is final.
func TestHistoryReadAsksAgain(t *testing.T) {
	old := readAttempt
	readAttempt = 300 * time.Millisecond
	defer func() { readAttempt = old }()
	e := enginetest.Engine(t)
	w, err := e.Worker("sessions")
	if err != nil {
		t.Fatal(err)
	}
	var calls, silent atomic.Int32
	var (
		mu     sync.Mutex
		answer error // after the silent calls
	)
	if err := w.Register(engine.Function{ID: sessionGet, Handler: engine.Typed(func(ctx context.Context, _ map[string]string) (sessionMeta, error) {
		if calls.Add(1) <= silent.Load() {
			<-ctx.Done() // no answer in time
			time.Sleep(50 * time.Millisecond)
			return sessionMeta{}, ctx.Err()
		}
		mu.Lock()
		defer mu.Unlock()
		if answer != nil {
			return sessionMeta{}, answer
		}
		return sessionMeta{EntryCount: 7}, nil
	})}); err != nil {
		t.Fatal(err)
	}
	h := newHistory(e, nil, nil)
	for _, tc := range []struct {
		name   string
		silent int32
		answer error
		calls  int32
		want   error
	}{
		{"answered", 0, nil, 1, nil},
		{"silent twice, then answered", 2, nil, 3, nil},
		{"not found is final", 1, wire.Errorf(wire.CodeNotFound, "no session"), 2, wire.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls.Store(0)
			silent.Store(tc.silent)
			mu.Lock()
			answer = tc.answer
			mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var m sessionMeta
			err := h.read(ctx, sessionGet, map[string]string{"session_id": "s1"}, &m)
			if got := calls.Load(); got != tc.calls {
				t.Fatalf("called %d times, want %d (%v)", got, tc.calls, err)
			}
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("err = %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil || m.EntryCount != 7 {
				t.Fatalf("got %+v, %v", m, err)
			}
		})
	}
}
