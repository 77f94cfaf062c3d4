package compaction_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/compaction"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// A compaction of a path whose entries outgrow one answer of
// session::entries (over the server's max payload: custom entries the
// model never sees) reads the previous compaction's summary from the
// page that holds it, and updates it. Before, the read failed (internal:
// the reply exceeded the max payload), and a read of the first page
// alone would have summarised without it, losing what it held.
func TestCompactFindsSummaryOnLaterPage(t *testing.T) {
	t.Parallel()
	const maxPayload = 128 << 10
	f := newFixtureOn(t, enginetest.RunServer(t, enginetest.WithMaxPayload(maxPayload)), "", compaction.WithAuto(false))
	ctx := ctxT(t)
	sid := f.create(t)

	// Application data before the compaction, more than the max payload.
	f.conversation(t, sid, 1, 16)
	for b := range 4 {
		var custom []sessiontree.Entry
		for i := range 50 {
			custom = append(custom, sessiontree.Entry{Type: sessiontree.TypeCustom, CustomType: "ui.note",
				Data: map[string]any{"n": fmt.Sprintf("%d.%d", b, i), "text": pad(700)}})
		}
		if _, err := engine.Call[sessiontree.AppendBatchResponse](ctx, f.e, sessiontree.AppendBatchFunction,
			sessiontree.AppendBatchRequest{SessionID: sid, Entries: custom}); err != nil {
			t.Fatal(err)
		}
	}
	f.conversation(t, sid, 17, 32)
	r1, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid})
	if err != nil || !r1.Compacted {
		t.Fatalf("first compaction: %+v, %v", r1, err)
	}
	f.conversation(t, sid, 33, 64)

	entries := func() []sessiontree.Entry {
		t.Helper()
		var out []sessiontree.Entry
		req := sessiontree.EntriesRequest{SessionID: sid}
		for {
			r, err := engine.Call[sessiontree.EntriesResponse](ctx, f.e, sessiontree.EntriesFunction, req)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r.Entries...)
			if !r.Truncated {
				return out
			}
			req.Leaf, req.After = r.Leaf, r.Entries[len(r.Entries)-1].ID
		}
	}
	if r, err := engine.Call[sessiontree.EntriesResponse](ctx, f.e, sessiontree.EntriesFunction, sessiontree.ReadRequest{SessionID: sid}); err != nil ||
		!r.Truncated || slices.ContainsFunc(r.Entries, func(en sessiontree.Entry) bool { return en.ID == r1.EntryID }) {
		t.Fatalf("setup: the first page of entries (truncated %v, %v) should not hold the compaction %s", r.Truncated, err, r1.EntryID)
	}

	r2, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid})
	if err != nil || !r2.Compacted {
		t.Fatalf("second compaction: %+v, %v", r2, err)
	}
	var s1, s2 string
	for _, en := range entries() {
		switch en.ID {
		case r1.EntryID:
			s1 = en.Summary
		case r2.EntryID:
			s2 = en.Summary
		}
	}
	if s1 == "" || !strings.Contains(s2, s1) {
		t.Fatalf("summary 2 does not update summary 1 %q:\n%s", s1, s2)
	}
}

// A compaction of a path whose messages outgrow one answer of
// session::messages updates the previous summary. The first page of a
// view read in pages has no path steps, and the previous compaction was
// taken for a plain user message: summarised as conversation instead of
// updated, its quote and its time (the trigger's staleness check) lost.
func TestCompactUpdatesSummaryOfPagedView(t *testing.T) {
	t.Parallel()
	const maxPayload = 128 << 10
	f := newFixtureOn(t, enginetest.RunServer(t, enginetest.WithMaxPayload(maxPayload)), "", compaction.WithAuto(false))
	ctx := ctxT(t)
	sid := f.create(t)
	f.conversation(t, sid, 1, 32)
	r1, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid})
	if err != nil || !r1.Compacted {
		t.Fatalf("first compaction: %+v, %v", r1, err)
	}
	var s1 string
	for _, en := range f.compactions(t, sid) {
		s1 = en.Summary
	}
	for from := 33; from <= 352; from += 32 {
		f.conversation(t, sid, from, from+31)
	}
	if v, err := engine.Call[sessiontree.MessagesResponse](ctx, f.e, sessiontree.MessagesFunction, sessiontree.ReadRequest{SessionID: sid}); err != nil ||
		!v.Truncated || len(v.Messages) == 0 || v.Messages[0].EntryID != r1.EntryID {
		t.Fatalf("setup: the first page of messages (%v) should be truncated and start with the compaction %s", err, r1.EntryID)
	}

	r2, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid})
	if err != nil || !r2.Compacted {
		t.Fatalf("second compaction: %+v, %v", r2, err)
	}
	prompts := f.sum.allPrompts()
	if len(prompts) != r1.SummaryCalls+r2.SummaryCalls {
		t.Fatalf("%d prompts, want %d", len(prompts), r1.SummaryCalls+r2.SummaryCalls)
	}
	if p := prompts[r1.SummaryCalls]; s1 == "" || !strings.HasPrefix(p, "<previous-summary>\n"+s1+"\n</previous-summary>") {
		t.Fatalf("the second compaction does not update summary 1 %q; its first prompt:\n%.300s", s1, p)
	}
}

// The active leaf moving, while the summary is written, to a branch that
// left the kept part behind answers conflict (ErrPathChanged) for a path
// whose messages outgrow one answer of session::messages too. Before,
// the check read one page of session::messages, whose cut answer has no
// path steps: the kept entry was never found gone, and the session
// tree's refusal of the append came back as invalid_payload.
func TestCompactConflictOnPagedPath(t *testing.T) {
	t.Parallel()
	const maxPayload = 128 << 10
	f := newFixtureOn(t, enginetest.RunServer(t, enginetest.WithMaxPayload(maxPayload)), "", compaction.WithAuto(false))
	ctx := ctxT(t)
	sid := f.create(t)
	for from := 1; from <= 416; from += 32 {
		f.conversation(t, sid, from, from+31)
	}
	var ids []string
	req := sessiontree.EntriesRequest{SessionID: sid}
	for {
		r, err := engine.Call[sessiontree.EntriesResponse](ctx, f.e, sessiontree.EntriesFunction, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range r.Entries {
			ids = append(ids, en.ID)
		}
		if !r.Truncated {
			break
		}
		req.Leaf, req.After = r.Leaf, r.Entries[len(r.Entries)-1].ID
	}
	if len(ids) != 416 {
		t.Fatalf("setup: %d entries on the path, want 416", len(ids))
	}

	type answer struct {
		r   compaction.CompactResponse
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid, Model: gatedModel})
		done <- answer{r, err}
	}()
	enginetest.Eventually(t, 5*time.Second, func() error {
		if f.sum.calls.Load() == 0 {
			return errors.New("the summary is not being written yet")
		}
		return nil
	})
	// The new branch leaves the newest 32 messages (the kept part among
	// them) behind and is still too long for one answer.
	if _, err := engine.Call[sessiontree.SetActiveLeafResponse](ctx, f.e, sessiontree.SetActiveLeafFunction,
		sessiontree.SetActiveLeafRequest{SessionID: sid, EntryID: ids[len(ids)-33]}); err != nil {
		t.Fatal(err)
	}
	f.conversation(t, sid, 1001, 1002)
	if v := f.view(t, sid); !v.Truncated || len(v.Path) != 0 || v.PathOmitted == 0 {
		t.Fatalf("setup: the new path's first page of messages (truncated %v, %d steps, %d omitted) should come cut and without steps",
			v.Truncated, len(v.Path), v.PathOmitted)
	}
	close(f.sum.gate)
	a := <-done
	if !errors.Is(a.err, wire.ErrConflict) || !strings.Contains(a.err.Error(), compaction.ErrPathChanged.Error()) {
		t.Fatalf("answered %+v, %v; want a conflict (%v)", a.r, a.err, compaction.ErrPathChanged)
	}
	if c := f.compactions(t, sid); len(c) != 0 {
		t.Fatalf("%d compaction entries on the new path", len(c))
	}
}
