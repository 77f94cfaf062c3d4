package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/sessiontree"
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

// TestHistoryReadsEveryPage: a transcript whose messages outgrow one
// answer of session::messages (a server with a small max payload) is
// read page by page, whole; before, the session tree failed the read, and
// once it paged, the first page alone would have been the transcript.
func TestHistoryReadsEveryPage(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(16<<10))
	e := enginetest.NewEngine(t, ns)
	tree := sessiontree.NewWorker()
	if err := tree.Start(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tree.Close(context.Background()) })
	h := newHistory(e, newPublisher(e), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const sid = "pages1"
	if err := h.ensure(ctx, sid); err != nil {
		t.Fatal(err)
	}
	const n = 300 // ≈ 60 KB of messages: four or more pages
	for i := range n {
		msg := agent.Message{Role: agent.RoleUser, Content: []agent.Content{agent.Text(fmt.Sprintf("message %03d %s", i, strings.Repeat("x", 150)))}, Timestamp: int64(i + 1)}
		if err := h.Append(ctx, sid, fmt.Sprintf("r:%d:0", i), []agent.Message{msg}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Flush(ctx, sid); err != nil {
		t.Fatal(err)
	}
	// The first page alone is what a reader that does not page gets.
	var first pathMessages
	if err := h.read(ctx, sessionMessages, map[string]string{"session_id": sid}, &first); err != nil || !first.Truncated || len(first.Messages) >= n {
		t.Fatalf("first page: %d messages, truncated %v, %v", len(first.Messages), first.Truncated, err)
	}
	h.forget(sid) // read from the tree, not from what the appends left
	msgs, _, err := h.LoadIdentified(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != n {
		t.Fatalf("%d messages, want %d", len(msgs), n)
	}
	for i, m := range msgs {
		if want := fmt.Sprintf("message %03d ", i); !strings.HasPrefix(m.Content[0].Text, want) {
			t.Fatalf("message %d is %.20q", i, m.Content[0].Text)
		}
	}
}

// TestFunctionKnownAfterAMissedDiscovery: a fresh catalog from a
// discovery that missed a worker (its $SRV reply came after the quiet
// period, as under load) does not make a served function unknown: one of
// this process is known without discovery, and any other is asked for
// once more. Before, run::start refused such a provider as unknown for
// the catalog's freshness.
func TestFunctionKnownAfterAMissedDiscovery(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	for _, local := range []bool{true, false} {
		t.Run(fmt.Sprintf("local=%v", local), func(t *testing.T) {
			e := enginetest.NewEngine(t, ns, engine.WithLocalCalls(local))
			w, err := e.Worker("prov")
			if err != nil {
				t.Fatal(err)
			}
			id := fmt.Sprintf("provider::missed%v::stream", local)
			if err := w.Register(engine.Function{ID: id, Handler: func(context.Context, *engine.Request) (any, error) { return nil, nil }}); err != nil {
				t.Fatal(err)
			}
			missed := &catalogCache{e: e, ttl: time.Hour, at: time.Now(), byID: map[string]engine.FunctionInfo{}}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if !functionKnown(ctx, e, missed, id) {
				t.Fatalf("%s served but unknown", id)
			}
			if functionKnown(ctx, e, missed, "provider::nobody::stream") {
				t.Fatal("a function nobody serves is known")
			}
		})
	}
}
