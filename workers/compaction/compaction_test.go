package compaction_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/compaction"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// checkView checks what the model sees after a compaction answered r: the
// summary (as the tree presents it), then the messages from the first
// kept one on, all under the usable window.
func checkView(t *testing.T, f *fixture, sid string, r compaction.CompactResponse, summary string) sessiontree.MessagesResponse {
	t.Helper()
	v := f.view(t, sid)
	if len(v.Messages) < 2 {
		t.Fatalf("view has %d messages", len(v.Messages))
	}
	if v.Messages[0].EntryID != r.EntryID {
		t.Fatalf("first message is entry %s, want the compaction %s", v.Messages[0].EntryID, r.EntryID)
	}
	if got := v.Messages[0].Message.Content[0].Text; got != sessiontree.CompactionPrefix+summary {
		t.Fatalf("summary message = %.200q", got)
	}
	if v.Messages[1].EntryID != r.FirstKeptEntryID {
		t.Fatalf("second message is entry %s, want the first kept %s", v.Messages[1].EntryID, r.FirstKeptEntryID)
	}
	if v.Messages[1].Message.Role != agent.RoleUser {
		t.Fatalf("first kept message is a %s message", v.Messages[1].Message.Role)
	}
	est := compaction.EstimateTokens(viewMessages(v))
	if est >= usable {
		t.Fatalf("view after compaction is %d tokens, not under the usable window %d", est, usable)
	}
	if est < r.TokensAfter || est > r.TokensAfter+len(sessiontree.CompactionPrefix)/4+1 {
		t.Fatalf("view is %d tokens, compaction said %d", est, r.TokensAfter)
	}
	return v
}

func markers(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("m%d", i))
	}
	return out
}

// A conversation that crosses the window twice is compacted twice; the
// second summary updates the first.
func TestCompactTwice(t *testing.T) {
	t.Parallel()
	f := newFixture(t, compaction.WithAuto(false))
	ctx := ctxT(t)
	sid := f.create(t)

	f.conversation(t, sid, 1, 32)
	before := compaction.EstimateTokens(viewMessages(f.view(t, sid)))
	if before <= usable {
		t.Fatalf("setup: %d tokens do not cross the window", before)
	}
	r1, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid, Reason: compaction.ReasonOverflow})
	if err != nil {
		t.Fatal(err)
	}
	if !r1.Compacted || r1.SummaryCalls != 1 || r1.TokensBefore != before || r1.TokensAfter >= usable {
		t.Fatalf("first compaction: %+v (before %d)", r1, before)
	}
	c1 := f.compactions(t, sid)
	if len(c1) != 1 || c1[0].ID != r1.EntryID || c1[0].FirstKeptEntryID != r1.FirstKeptEntryID || c1[0].TokensBefore != int64(before) {
		t.Fatalf("compaction entries: %+v", c1)
	}
	s1 := c1[0].Summary
	v1 := checkView(t, f, sid, r1, s1)
	// The kept tail is the newest ~750 tokens from a user message on;
	// everything before it is in the summary.
	k := firstMarker(t, v1.Messages[1].Message)
	if kept := compaction.EstimateTokens(viewMessages(v1)[1:]); kept > keepDefault {
		t.Fatalf("kept %d tokens, more than keep_tokens %d", kept, keepDefault)
	}
	if k < 20 || k%2 != 1 {
		t.Fatalf("first kept message is m%d", k)
	}
	if want := "seen: " + strings.Join(markers(1, k-1), " "); !strings.HasPrefix(s1, "## Goal\n"+want) {
		t.Fatalf("summary 1 = %q, want it to start with %q", s1, want)
	}

	// Cross the window again.
	f.conversation(t, sid, 33, 64)
	r2, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid, Reason: compaction.ReasonOverflow})
	if err != nil {
		t.Fatal(err)
	}
	if !r2.Compacted || r2.TokensBefore <= usable {
		t.Fatalf("second compaction: %+v", r2)
	}
	c2 := f.compactions(t, sid)
	if len(c2) != 2 {
		t.Fatalf("%d compaction entries", len(c2))
	}
	s2 := c2[1].Summary
	if !strings.Contains(s2, s1) {
		t.Fatalf("summary 2 does not update summary 1:\n%s", s2)
	}
	v2 := checkView(t, f, sid, r2, s2)
	k2 := firstMarker(t, v2.Messages[1].Message)
	got := words(s2)
	for _, m := range markers(1, k2-1) {
		if !got[m] {
			t.Fatalf("summary 2 misses %s:\n%s", m, s2)
		}
	}
	prompts := f.sum.allPrompts()
	if p := prompts[r1.SummaryCalls]; !strings.HasPrefix(p, "<previous-summary>\n"+s1+"\n</previous-summary>") {
		t.Fatalf("the summarizer did not get the previous summary:\n%.300s", p)
	}
	if len(prompts) != r1.SummaryCalls+r2.SummaryCalls {
		t.Fatalf("%d summarizer calls, compactions said %d + %d", len(prompts), r1.SummaryCalls, r2.SummaryCalls)
	}
}

// Two compactions racing for one session: one runs the provider, the
// other answers in_progress at once, or done_by_other when it waits.
func TestCompactRace(t *testing.T) {
	t.Parallel()
	f := newFixture(t, compaction.WithAuto(false))
	ctx := ctxT(t)
	sid := f.create(t)
	f.conversation(t, sid, 1, 32)

	req := compaction.CompactRequest{SessionID: sid, Model: gatedModel}
	type answer struct {
		r   compaction.CompactResponse
		err error
	}
	racers := make(chan answer, 2)
	var start sync.WaitGroup
	start.Add(1)
	for range 2 {
		go func() {
			start.Wait()
			r, err := f.compact(ctx, req)
			racers <- answer{r, err}
		}()
	}
	start.Done()
	// One holds the lease (blocked in the summarizer), the other answers.
	first := <-racers
	if first.err != nil || first.r.Compacted || first.r.Reason != compaction.OutcomeInProgress {
		t.Fatalf("loser answered %+v, %v", first.r, first.err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if n := f.sum.calls.Load(); n != 1 {
			return fmt.Errorf("%d summarizer calls", n)
		}
		return nil
	})
	// A waiting caller waits for the winner.
	waiter := make(chan answer, 1)
	go func() {
		r, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid, Model: gatedModel, Wait: true, Reason: compaction.ReasonOverflow})
		waiter <- answer{r, err}
	}()
	select {
	case a := <-waiter:
		t.Fatalf("the waiter answered while the lease is held: %+v, %v", a.r, a.err)
	case <-time.After(200 * time.Millisecond):
	}
	close(f.sum.gate)
	won := <-racers
	if won.err != nil || !won.r.Compacted {
		t.Fatalf("winner answered %+v, %v", won.r, won.err)
	}
	w := <-waiter
	if w.err != nil || w.r.Compacted || w.r.Reason != compaction.OutcomeDoneByOther {
		t.Fatalf("waiter answered %+v, %v", w.r, w.err)
	}
	if n := f.sum.calls.Load(); n != 1 {
		t.Fatalf("%d summarizer calls, want 1", n)
	}
	if c := f.compactions(t, sid); len(c) != 1 {
		t.Fatalf("%d compaction entries", len(c))
	}
	// The lease is gone: the next compaction runs (and finds nothing).
	r, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid})
	if err != nil || r.Compacted || r.Reason != compaction.OutcomeNothingToCompact {
		t.Fatalf("after the race: %+v, %v", r, err)
	}
}

// A lease whose holder crashed expires; until then callers answer
// in_progress, and a waiting caller answers done_by_other once it is
// gone.
func TestLeaseExpiry(t *testing.T) {
	t.Parallel()
	f := newFixture(t, compaction.WithAuto(false), compaction.WithLeaseTTL(time.Second))
	ctx := ctxT(t)
	sid := f.create(t)
	f.conversation(t, sid, 1, 32)

	kv, err := f.e.JetStream().KeyValue(ctx, compaction.LeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, sid, []byte(`{"owner":"crashed"}`), jetstream.KeyTTL(time.Second)); err != nil {
		t.Fatal(err)
	}
	r, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid})
	if err != nil || r.Reason != compaction.OutcomeInProgress {
		t.Fatalf("with a crashed holder's lease: %+v, %v", r, err)
	}
	began := time.Now()
	r, err = f.compact(ctx, compaction.CompactRequest{SessionID: sid, Wait: true})
	if err != nil || r.Reason != compaction.OutcomeDoneByOther {
		t.Fatalf("waiting for an expiring lease: %+v, %v", r, err)
	}
	if d := time.Since(began); d > 4*time.Second {
		t.Fatalf("the lease expired after %v", d)
	}
	r, err = f.compact(ctx, compaction.CompactRequest{SessionID: sid})
	if err != nil || !r.Compacted {
		t.Fatalf("after expiry: %+v, %v", r, err)
	}
	if f.sum.calls.Load() != 1 {
		t.Fatalf("%d summarizer calls", f.sum.calls.Load())
	}
}

// A caller that waits for another compaction compacts the session itself
// when that one wrote nothing: its model failed, or its holder crashed
// (kill -9: the lease, with its start, expires). Before, it answered
// done_by_other and the orchestrator sent the uncompacted transcript to
// the model. It still answers done_by_other when the other one wrote its
// entry (TestCompactRace), and a path compacted before the other one
// started does not count.
func TestWaiterCompactsWhenTheOtherWroteNothing(t *testing.T) {
	t.Parallel()
	wait := compaction.CompactRequest{Wait: true, Reason: compaction.ReasonOverflow}
	t.Run("failed", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, compaction.WithAuto(false))
		ctx := ctxT(t)
		sid := f.create(t)
		f.conversation(t, sid, 1, 32)
		held := make(chan error, 1)
		go func() {
			_, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid, Model: gatedBrokenModel})
			held <- err
		}()
		enginetest.Eventually(t, 5*time.Second, func() error {
			if n := f.sum.calls.Load(); n != 1 {
				return fmt.Errorf("%d summarizer calls", n)
			}
			return nil
		})
		type answer struct {
			r   compaction.CompactResponse
			err error
		}
		waiter := make(chan answer, 1)
		go func() {
			req := wait
			req.SessionID = sid
			r, err := f.compact(ctx, req)
			waiter <- answer{r, err}
		}()
		select {
		case a := <-waiter:
			t.Fatalf("the waiter answered while the lease is held: %+v, %v", a.r, a.err)
		case <-time.After(200 * time.Millisecond):
		}
		close(f.sum.gate)
		if err := <-held; !errors.Is(err, wire.ErrInternal) {
			t.Fatalf("the holder answered %v, want its model's failure", err)
		}
		a := <-waiter
		if a.err != nil || !a.r.Compacted {
			t.Fatalf("the waiter answered %+v, %v; want compacted", a.r, a.err)
		}
		if c := f.compactions(t, sid); len(c) != 1 {
			t.Fatalf("%d compaction entries", len(c))
		}
	})
	t.Run("crashed", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, compaction.WithAuto(false), compaction.WithLeaseTTL(time.Second))
		ctx := ctxT(t)
		sid := f.create(t)
		f.conversation(t, sid, 1, 32)
		if r, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid}); err != nil || !r.Compacted {
			t.Fatalf("first compaction: %+v, %v", r, err)
		}
		f.conversation(t, sid, 33, 64)
		kv, err := f.e.JetStream().KeyValue(ctx, compaction.LeaseBucket)
		if err != nil {
			t.Fatal(err)
		}
		// What a node killed mid-compaction leaves behind.
		lease := fmt.Sprintf(`{"owner":"crashed","reason":"threshold","started_at_ms":%d}`, time.Now().UnixMilli())
		if _, err := kv.Create(ctx, sid, []byte(lease), jetstream.KeyTTL(time.Second)); err != nil {
			t.Fatal(err)
		}
		req := wait
		req.SessionID = sid
		r, err := f.compact(ctx, req)
		if err != nil || !r.Compacted {
			t.Fatalf("waiting for a crashed holder: %+v, %v; want compacted", r, err)
		}
		if c := f.compactions(t, sid); len(c) != 2 {
			t.Fatalf("%d compaction entries, want 2", len(c))
		}
	})
}

// A compaction longer than the lease TTL renews its lease, so nobody
// else starts meanwhile; a regional session's lease (key "eu.s1", in the
// primary lease bucket) works the same, and does not hold the plain
// session "eu" back.
func TestLeaseRenewal(t *testing.T) {
	t.Parallel()
	for _, sid := range []string{"plain", "eu.s1"} {
		t.Run(sid, func(t *testing.T) {
			t.Parallel()
			testLeaseRenewal(t, sid)
		})
	}
}

func testLeaseRenewal(t *testing.T, sid string) {
	f := newFixtureIn(t, "eu", compaction.WithAuto(false), compaction.WithLeaseTTL(time.Second))
	ctx := ctxT(t)
	f.create(t, sid)
	f.conversation(t, sid, 1, 32)
	kv, err := f.e.JetStream().KeyValue(ctx, compaction.LeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		r, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid, Model: gatedModel})
		if err == nil && !r.Compacted {
			err = fmt.Errorf("not compacted: %+v", r)
		}
		done <- err
	}()
	var rev0 uint64
	enginetest.Eventually(t, 5*time.Second, func() error {
		e, err := kv.Get(ctx, sid)
		if err != nil {
			return err
		}
		rev0 = e.Revision()
		return nil
	})
	// Four renewals (every third of the TTL) outlast the TTL.
	enginetest.Eventually(t, 5*time.Second, func() error {
		e, err := kv.Get(ctx, sid)
		if err != nil {
			return fmt.Errorf("lease gone: %w", err)
		}
		if e.Revision() < rev0+4 {
			return fmt.Errorf("lease at revision %d", e.Revision())
		}
		return nil
	})
	r, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid})
	if err != nil || r.Reason != compaction.OutcomeInProgress {
		t.Fatalf("during a renewed compaction: %+v, %v", r, err)
	}
	// Another session, a plain one named like the region, is not held
	// back (its lease key "eu" is not "eu.s1").
	other := f.create(t, "eu")
	f.conversation(t, other, 1, 32)
	if r, err := f.compact(ctx, compaction.CompactRequest{SessionID: other}); err != nil || !r.Compacted {
		t.Fatalf("another session during a compaction: %+v, %v", r, err)
	}
	close(f.sum.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, sid); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("lease not released: %v", err)
	}
}

// Function outputs above prune_bytes reach the summarizer as a marker.
func TestPruning(t *testing.T) {
	t.Parallel()
	f := newFixture(t, compaction.WithAuto(false))
	ctx := ctxT(t)
	sid := f.create(t)
	big := strings.Repeat("y", 5000)
	f.appendMsgs(t, sid,
		agent.UserText("m1 read the file", 1),
		call("call_1", "fs::read", map[string]any{"path": "/big"}),
		result("call_1", "fs::read", big),
		call("call_2", "fs::stat", map[string]any{"path": "/small"}),
		result("call_2", "fs::stat", "size 12"),
		exchange(2, 100),
	)
	f.conversation(t, sid, 3, 12)
	r, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid, KeepTokens: 300})
	if err != nil || !r.Compacted {
		t.Fatalf("%+v, %v", r, err)
	}
	p := f.sum.lastPrompt()
	for _, want := range []string{
		"[output of fs::read pruned: 5000 bytes]",
		`[call fs::read (call_1)] {"path":"/big"}`,
		"[function_result fs::stat (call_2)]\nsize 12\n",
	} {
		if !strings.Contains(p, want) {
			t.Errorf("summarizer prompt lacks %q", want)
		}
	}
	if strings.Contains(p, "yyyy") {
		t.Error("the pruned output reached the summarizer")
	}
}

// An old part larger than the window is summarized in chunks, each
// folded into the running summary; no request exceeds the window (the
// summarizer would fail).
func TestChunkedSummary(t *testing.T) {
	t.Parallel()
	f := newFixture(t, compaction.WithAuto(false))
	ctx := ctxT(t)
	sid := f.create(t)
	for i := 1; i <= 120; i += 40 {
		f.conversation(t, sid, i, i+39)
	}
	r, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid})
	if err != nil || !r.Compacted {
		t.Fatalf("%+v, %v", r, err)
	}
	if r.TokensBefore < 3*usable || r.SummaryCalls < 4 || int64(r.SummaryCalls) != f.sum.calls.Load() {
		t.Fatalf("%d tokens summarized in %d calls (%d counted)", r.TokensBefore, r.SummaryCalls, f.sum.calls.Load())
	}
	c := f.compactions(t, sid)
	if len(c) != 1 {
		t.Fatalf("%d compactions", len(c))
	}
	v := checkView(t, f, sid, r, c[0].Summary)
	k := firstMarker(t, v.Messages[1].Message)
	// Every summarized message's marker survives the folding.
	got := words(c[0].Summary)
	for _, m := range markers(1, k-1) {
		if !got[m] {
			t.Fatalf("summary lost %s:\n%s", m, c[0].Summary)
		}
	}
}

// Nothing older than the cut: nothing is written.
func TestNothingToCompact(t *testing.T) {
	t.Parallel()
	f := newFixture(t, compaction.WithAuto(false))
	ctx := ctxT(t)
	sid := f.create(t)
	f.conversation(t, sid, 1, 4)
	r, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid})
	if err != nil || r.Compacted || r.Reason != compaction.OutcomeNothingToCompact || r.TokensBefore == 0 || r.TokensAfter != r.TokensBefore {
		t.Fatalf("%+v, %v", r, err)
	}
	// An empty session, and one that is one huge user turn with splitting
	// off, have nothing to compact either.
	empty := f.create(t)
	if r, err := f.compact(ctx, compaction.CompactRequest{SessionID: empty}); err != nil || r.Reason != compaction.OutcomeNothingToCompact {
		t.Fatalf("empty session: %+v, %v", r, err)
	}
	if c := f.compactions(t, sid); len(c) != 0 || f.sum.calls.Load() != 0 {
		t.Fatalf("%d compactions, %d calls", len(c), f.sum.calls.Load())
	}
}

// One user prompt followed by a long agent loop: the kept part starts at
// an assistant message and the summary quotes the prompt; with
// split_turns off there is nothing to compact.
func TestSplitTurn(t *testing.T) {
	t.Parallel()
	long := func(f *fixture, sid string) {
		msgs := []agent.Message{agent.UserText("m1 please refactor the parser", 1)}
		for i := 0; i < 14; i++ {
			id := fmt.Sprintf("call_%d", i)
			msgs = append(msgs, call(id, "fs::read", map[string]any{"path": fmt.Sprintf("/f%d", i)}),
				result(id, "fs::read", fmt.Sprintf("m%d %s", i+2, pad(800))))
		}
		f.appendMsgs(t, sid, msgs...)
	}
	t.Run("split", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, compaction.WithAuto(false))
		sid := f.create(t)
		long(f, sid)
		r, err := f.compact(ctxT(t), compaction.CompactRequest{SessionID: sid})
		if err != nil || !r.Compacted {
			t.Fatalf("%+v, %v", r, err)
		}
		v := f.view(t, sid)
		if v.Messages[1].Message.Role != agent.RoleAssistant || v.Messages[1].EntryID != r.FirstKeptEntryID {
			t.Fatalf("kept part starts with %+v", v.Messages[1])
		}
		s := f.compactions(t, sid)[0].Summary
		if !strings.HasSuffix(s, compaction.LatestRequestHeading+"\n\nm1 please refactor the parser") {
			t.Fatalf("summary does not quote the prompt:\n%s", s)
		}
		if est := compaction.EstimateTokens(viewMessages(v)); est >= usable {
			t.Fatalf("view is %d tokens", est)
		}
		// Again: no user message after the summary; the quote carries over.
		long2 := []agent.Message{}
		for i := 20; i < 30; i++ {
			id := fmt.Sprintf("call_%d", i)
			long2 = append(long2, call(id, "fs::read", nil), result(id, "fs::read", fmt.Sprintf("m%d %s", i, pad(800))))
		}
		f.appendMsgs(t, sid, long2...)
		r, err = f.compact(ctxT(t), compaction.CompactRequest{SessionID: sid})
		if err != nil || !r.Compacted {
			t.Fatalf("second: %+v, %v", r, err)
		}
		s = f.compactions(t, sid)[1].Summary
		if strings.Count(s, compaction.LatestRequestHeading) != 1 || !strings.HasSuffix(s, "m1 please refactor the parser") {
			t.Fatalf("second summary does not carry the quote:\n%s", s)
		}
	})
	t.Run("no split", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, compaction.WithAuto(false), compaction.WithSplitTurns(false))
		sid := f.create(t)
		long(f, sid)
		r, err := f.compact(ctxT(t), compaction.CompactRequest{SessionID: sid})
		if err != nil || r.Reason != compaction.OutcomeNothingToCompact {
			t.Fatalf("%+v, %v", r, err)
		}
	})
}

// quoteOf is the quote of a summary's latest-request section, and
// whether it has one.
func quoteOf(summary string) (string, bool) {
	i := strings.Index(summary, compaction.LatestRequestHeading+"\n\n")
	if i < 0 {
		return "", false
	}
	return summary[i+len(compaction.LatestRequestHeading)+2:], true
}

// splitTurn appends a user prompt of promptBytes bytes ("m1 " then
// filler) followed by pairs call/result pairs whose results are
// resultBytes bytes each, one append per message (each may be large).
func (f *fixture) splitTurn(t *testing.T, sid string, promptBytes, pairs, resultBytes int) string {
	t.Helper()
	prompt := "m1 " + pad(promptBytes-3)
	f.appendMsgs(t, sid, agent.UserText(prompt, 1))
	for i := range pairs {
		id := fmt.Sprintf("call_%d", i)
		f.appendMsgs(t, sid, call(id, "fs::read", map[string]any{"path": fmt.Sprintf("/f%d", i)}))
		f.appendMsgs(t, sid, result(id, "fs::read", fmt.Sprintf("m%d %s", i+2, pad(resultBytes))))
	}
	return prompt
}

// The quote of a split turn's request is bounded in estimated tokens:
// twice keep_tokens (the turn size the cut keeps whole), at 4 bytes a
// token. A prompt within it is quoted verbatim; a longer one loses its
// middle down to that many bytes.
func TestQuoteFollowsKeepTokens(t *testing.T) {
	t.Parallel()
	f := newFixture(t, compaction.WithAuto(false))
	tests := []struct {
		name        string
		keep        int
		promptBytes int
		verbatim    bool
	}{
		{"well within", 100, 700, true},
		{"exactly twice keep", 100, 800, true},
		{"over twice keep", 100, 3000, false},
		{"larger keep, within", 150, 1100, true},
		{"larger keep, over", 150, 3000, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sid := f.create(t)
			prompt := f.splitTurn(t, sid, tt.promptBytes, 6, 800)
			r, err := f.compact(ctxT(t), compaction.CompactRequest{SessionID: sid, KeepTokens: tt.keep})
			if err != nil || !r.Compacted {
				t.Fatalf("%+v, %v", r, err)
			}
			q, ok := quoteOf(f.compactions(t, sid)[0].Summary)
			if !ok {
				t.Fatal("the split compaction quotes no request")
			}
			bound := 2 * tt.keep * 4 // twice keep_tokens, 4 bytes a token
			if tt.verbatim {
				if q != prompt {
					t.Fatalf("quote of %d bytes is not the %d-byte prompt verbatim (bound %d bytes)", len(q), len(prompt), bound)
				}
				return
			}
			if len(q) != bound || !strings.HasPrefix(q, "m1 ") || !strings.Contains(q, "middle omitted") {
				t.Fatalf("quote is %d bytes, want the prompt shortened to %d: %.80q", len(q), bound, q)
			}
			if tok := compaction.MessageTokens(agent.UserText(q, 0)); tok > 2*tt.keep {
				t.Fatalf("quote estimates %d tokens, over twice keep_tokens %d", tok, tt.keep)
			}
		})
	}
}

// On a large window the quote and the summary together can outgrow the
// session tree's entry limit (256 KiB): the quote is cut first, then the
// summary, so the entry is stored, and the session compacts again later.
func TestLargeWindowEntryFits(t *testing.T) {
	t.Parallel()
	// A reserve of 100k tokens lets the huge model answer ≈ 400 KB.
	f := newFixture(t, compaction.WithAuto(false), compaction.WithReserveTokens(100_000))
	const limit = compaction.DefaultMaxEntrySize
	tests := []struct {
		name         string
		summaryBytes int
		split        bool // a 240 KB prompt and a short agent loop; else four 100 KB exchanges
		wantQuote    int  // the quote's size: -1 when not shortened
		wantFull     bool // the summary is stored whole
	}{
		// 240 KB quoted verbatim (twice keep_tokens is 240,000 bytes)
		// plus a 64 KB summary (16k tokens) is over the limit: the
		// quote gives way.
		{"quote cut", 64 << 10, true, -1, true},
		// A summary over the limit on its own: the quote keeps its
		// minimum (256 bytes), the summary loses its middle.
		{"quote and summary cut", 300 << 10, true, 256, false},
		{"summary cut, no quote", 300 << 10, false, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not parallel: the huge model's summary size is the fixture's.
			f.sum.hugeBytes.Store(int64(tt.summaryBytes))
			sid := f.create(t)
			if tt.split {
				f.splitTurn(t, sid, 240_000, 2, 20_000)
			} else {
				for i := 1; i <= 4; i++ {
					f.appendMsgs(t, sid, exchange(i, 100_000))
				}
			}
			req := compaction.CompactRequest{SessionID: sid, Model: hugeModel, KeepTokens: 30_000}
			r, err := f.compact(ctxT(t), req)
			if err != nil || !r.Compacted {
				t.Fatalf("%+v, %v", r, err)
			}
			s := f.compactions(t, sid)[0].Summary
			if len(s) > limit || len(s) < limit-2048 {
				t.Fatalf("summary of %d bytes: want the entry limit %d used, less room for the other fields", len(s), limit)
			}
			body, q := s, ""
			if i := strings.Index(s, "\n\n"+compaction.LatestRequestHeading); i >= 0 {
				body, q = s[:i], s[i:]
				q, _ = quoteOf(q)
			}
			switch {
			case !tt.split && q != "":
				t.Fatalf("unexpected quote %.80q", q)
			case tt.split && (!strings.HasPrefix(q, "m1 ") || !strings.Contains(q, "middle omitted")):
				t.Fatalf("quote %.80q is not the prompt shortened", q)
			case tt.wantQuote > 0 && len(q) != tt.wantQuote:
				t.Fatalf("quote is %d bytes, want %d", len(q), tt.wantQuote)
			}
			if full := len(body) == tt.summaryBytes && !strings.Contains(body, "middle omitted"); full != tt.wantFull {
				t.Fatalf("summary of %d bytes (model answered %d): stored whole %v, want %v", len(body), tt.summaryBytes, full, tt.wantFull)
			}
			if !strings.HasPrefix(body, "## Goal\nseen: m1") || !strings.HasSuffix(body, summaryEnd) {
				t.Fatalf("summary lost its head or tail: %.80q … %q", body, body[max(len(body)-40, 0):])
			}
			// The session keeps compacting: nothing is stuck.
			f.sum.hugeBytes.Store(1 << 10)
			for i := 10; i <= 13; i++ {
				f.appendMsgs(t, sid, exchange(i, 30_000))
			}
			if r, err := f.compact(ctxT(t), req); err != nil || !r.Compacted {
				t.Fatalf("second compaction: %+v, %v", r, err)
			}
		})
	}
}

// A lowered entry limit (the session tree's max_entry_size, told to the
// worker) bounds the summary the same way.
func TestMaxEntrySize(t *testing.T) {
	t.Parallel()
	const limit = 32 << 10
	f := newFixture(t, compaction.WithAuto(false), compaction.WithMaxEntrySize(limit))
	f.sum.hugeBytes.Store(60 << 10) // within the default output bound (16k tokens)
	sid := f.create(t)
	for i := 1; i <= 4; i++ {
		f.appendMsgs(t, sid, exchange(i, 20_000))
	}
	r, err := f.compact(ctxT(t), compaction.CompactRequest{SessionID: sid, Model: hugeModel, KeepTokens: 5000})
	if err != nil || !r.Compacted {
		t.Fatalf("%+v, %v", r, err)
	}
	if s := f.compactions(t, sid)[0].Summary; len(s) > limit || len(s) < limit-2048 || !strings.Contains(s, "middle omitted") {
		t.Fatalf("summary of %d bytes under a limit of %d", len(s), limit)
	}
}

// Bad input answers coded errors and writes nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t, compaction.WithAuto(false))
	ctx := ctxT(t)
	sid := f.create(t)
	f.conversation(t, sid, 1, 32)
	tests := []struct {
		name string
		req  compaction.CompactRequest
		want error
		msg  string
	}{
		{"unknown session", compaction.CompactRequest{SessionID: "nobody"}, wire.ErrNotFound, ""},
		{"bad session id", compaction.CompactRequest{SessionID: "a.b.c"}, wire.ErrInvalidPayload, "session_id"},
		{"unknown region", compaction.CompactRequest{SessionID: "zz.q"}, wire.ErrNotFound, ""},
		{"no session id", compaction.CompactRequest{}, wire.ErrInvalidPayload, "session_id"},
		{"bad provider", compaction.CompactRequest{SessionID: sid, Provider: "a b"}, wire.ErrInvalidPayload, "provider"},
		{"bad model", compaction.CompactRequest{SessionID: sid, Model: "a b"}, wire.ErrInvalidPayload, "model"},
		{"unknown model", compaction.CompactRequest{SessionID: sid, Model: "nope"}, wire.ErrInvalidPayload, "unknown model"},
		{"unknown provider", compaction.CompactRequest{SessionID: sid, Provider: "acme"}, wire.ErrInvalidPayload, "unknown model"},
		{"bad reason", compaction.CompactRequest{SessionID: sid, Reason: "bored"}, wire.ErrInvalidPayload, "reason"},
		{"negative keep", compaction.CompactRequest{SessionID: sid, KeepTokens: -1}, wire.ErrInvalidPayload, "keep_tokens"},
		{"provider fails", compaction.CompactRequest{SessionID: sid, Model: brokenModel}, wire.ErrInternal, "broken"},
	}
	for _, tt := range tests {
		_, err := f.compact(ctx, tt.req)
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: %v, want %v containing %q", tt.name, err, tt.want, tt.msg)
		}
	}
	if c := f.compactions(t, sid); len(c) != 0 {
		t.Fatalf("%d compaction entries written", len(c))
	}
	kv, err := f.e.JetStream().KeyValue(ctx, compaction.LeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := kv.Keys(ctx); !errors.Is(err, jetstream.ErrNoKeysFound) {
		t.Fatalf("leases left: %v, %v", keys, err)
	}
	// JSON callers (the nats CLI) get the same checks.
	_, _, err = f.e.TriggerRaw(ctx, compaction.CompactFunction, []byte(`{"session_id":"s","provider":"scripted"}`), wire.JSON)
	if !errors.Is(err, wire.ErrInvalidPayload) {
		t.Fatalf("JSON without model: %v", err)
	}
	_, _, err = f.e.TriggerRaw(ctx, compaction.CompactFunction, []byte(`{"session_id":`), wire.JSON)
	if !errors.Is(err, wire.ErrInvalidPayload) {
		t.Fatalf("broken JSON: %v", err)
	}
}

// eventStream creates the events stream as the orchestrator does: the
// primary copy ("iii.events.*") and, on an engine with a region, that
// region's copy. It returns the primary one.
func eventStream(t *testing.T, f *fixture) jetstream.Stream {
	t.Helper()
	s, err := f.e.EnsureSessionStream(ctxT(t), jetstream.StreamConfig{
		Name: subjects.EventStream, Storage: jetstream.FileStorage,
	}, subjects.EventSubjectPrefix)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// bound waits until the trigger's consumer exists on s.
func bound(t *testing.T, s jetstream.Stream) {
	t.Helper()
	enginetest.Eventually(t, 10*time.Second, func() error {
		_, err := s.Consumer(ctxT(t), compaction.ConsumerName)
		return err
	})
}

func publishEvent(t *testing.T, f *fixture, ev agent.Event) {
	t.Helper()
	data, err := wire.JSON.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.JetStream().Publish(ctxT(t), "iii.events."+ev.SessionID, data); err != nil {
		t.Fatal(err)
	}
}

func turnEnd(sid string, input int64) agent.Event {
	return agent.Event{Type: agent.EventTurnEnd, SessionID: sid, TS: time.Now().UnixMilli(), Message: &agent.Message{
		Role: agent.RoleAssistant, Content: []agent.Content{agent.Text("done")}, StopReason: agent.StopEnd,
		Provider: "scripted", Model: tinyModel, Timestamp: time.Now().UnixMilli(),
		Usage: &agent.Usage{InputTokens: input, OutputTokens: 10},
	}}
}

// A turn_end whose usage reaches the window compacts the session; other
// events, and turn_ends under the window, do not.
func TestThresholdTrigger(t *testing.T) {
	t.Parallel()
	f := newFixture(t) // the worker starts before the stream exists
	ctx := ctxT(t)
	s := eventStream(t, f)
	enginetest.Eventually(t, 5*time.Second, func() error {
		_, err := s.Consumer(ctx, compaction.ConsumerName)
		return err
	})
	big, small := f.create(t), f.create(t)
	f.conversation(t, big, 1, 32)
	f.conversation(t, small, 1, 32)

	publishEvent(t, f, agent.Event{Type: agent.EventMessageUpdate, SessionID: big, Delta: "hi"})
	publishEvent(t, f, turnEnd(small, usable-11)) // 2999 < 3000
	publishEvent(t, f, turnEnd(big, usable-10))   // 3000
	publishEvent(t, f, agent.Event{Type: agent.EventAgentEnd, SessionID: big, StopReason: agent.StopEnd})

	drained(t, s, 4)
	if c := f.compactions(t, big); len(c) != 1 {
		t.Fatalf("%d compactions of the session over the threshold", len(c))
	}
	if c := f.compactions(t, small); len(c) != 0 {
		t.Fatalf("%d compactions of the session under the threshold", len(c))
	}
	// A turn_end from before that compaction is stale: skipped.
	stale := turnEnd(big, usable)
	stale.Message.Timestamp = time.Now().Add(-time.Hour).UnixMilli()
	publishEvent(t, f, stale)
	f.conversation(t, big, 33, 64)
	publishEvent(t, f, turnEnd(big, usable+500))
	drained(t, s, 6)
	if c := f.compactions(t, big); len(c) != 2 {
		t.Fatalf("%d compactions, want 2 (the stale turn_end is skipped)", len(c))
	}
}

// A regional session's turn_end lands in the region's copy of the events
// stream ("iii.events.eu.s1" in III_EVENTS_AT_eu) and compacts the
// session just as a plain session's does. The copy, created after the
// worker started, is found by the trigger's rescan, and bound again when
// it is deleted and created anew.
func TestThresholdTriggerRegional(t *testing.T) {
	t.Parallel()
	f := newFixtureIn(t, "eu", compaction.WithRescanInterval(100*time.Millisecond))
	ctx := ctxT(t)
	primary := eventStream(t, f)
	copyName := subjects.RegionalStream(subjects.EventStream, "eu")
	regional, err := f.e.JetStream().Stream(ctx, copyName)
	if err != nil {
		t.Fatal(err)
	}
	bound(t, primary)
	bound(t, regional)
	plain, homed := f.create(t, "p1"), f.create(t, "eu.s1")
	f.conversation(t, plain, 1, 32)
	f.conversation(t, homed, 1, 32)
	publishEvent(t, f, turnEnd(homed, usable-10))
	publishEvent(t, f, turnEnd(plain, usable-10))
	drained(t, regional, 1)
	drained(t, primary, 1)
	for _, c := range []struct {
		s    jetstream.Stream
		want uint64
	}{{primary, 1}, {regional, 1}} {
		info, err := c.s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != c.want {
			t.Errorf("%s holds %d events, want %d", info.Config.Name, info.State.Msgs, c.want)
		}
	}
	for _, sid := range []string{plain, homed} {
		if c := f.compactions(t, sid); len(c) != 1 {
			t.Fatalf("%s: %d compactions, want 1", sid, len(c))
		}
	}

	// The copy goes away and comes back (as an operator recreates it;
	// the engine caches the handles it ensured): the trigger binds it
	// again.
	cfg := regional.CachedInfo().Config
	if err := f.e.JetStream().DeleteStream(ctx, copyName); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // a rescan or two without the copy
	if regional, err = f.e.JetStream().CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	bound(t, regional)
	f.conversation(t, homed, 33, 64)
	publishEvent(t, f, turnEnd(homed, usable+500))
	drained(t, regional, 1)
	if c := f.compactions(t, homed); len(c) != 2 {
		t.Fatalf("%d compactions after the copy came back, want 2", len(c))
	}
}

// drained waits until the trigger's consumer has acked every event of the
// stream, at least n of them.
func drained(t *testing.T, s jetstream.Stream, n uint64) {
	t.Helper()
	enginetest.Eventually(t, 10*time.Second, func() error {
		c, err := s.Consumer(ctxT(t), compaction.ConsumerName)
		if err != nil {
			return err
		}
		ci, err := c.Info(ctxT(t))
		if err != nil {
			return err
		}
		if ci.NumPending != 0 || ci.NumAckPending != 0 || ci.AckFloor.Stream < n {
			return fmt.Errorf("consumer: pending %d, ack pending %d, ack floor %d", ci.NumPending, ci.NumAckPending, ci.AckFloor.Stream)
		}
		return nil
	})
}

// Provision reads the settings and refuses bad ones.
func TestProvision(t *testing.T) {
	t.Parallel()
	tests := []struct {
		settings map[string]string
		ok       bool
	}{
		{map[string]string{}, true},
		{map[string]string{"reserve_tokens": "8000", "keep_fraction": "0.3", "prune_bytes": "4096", "lease_ttl": "90s",
			"auto": "false", "concurrency": "2", "timeout": "5m", "split_turns": "false",
			"max_entry_size": "1048576"}, true},
		{map[string]string{"max_entry_size": "1024"}, false},
		{map[string]string{"max_entry_size": "big"}, false},
		{map[string]string{"reserve_tokens": "0"}, false},
		{map[string]string{"reserve_tokens": "many"}, false},
		{map[string]string{"keep_fraction": "1"}, false},
		{map[string]string{"keep_fraction": "NaN"}, false},
		{map[string]string{"prune_bytes": "10"}, false},
		{map[string]string{"lease_ttl": "10ms"}, false},
		{map[string]string{"lease_ttl": "soon"}, false},
		{map[string]string{"auto": "maybe"}, false},
		{map[string]string{"concurrency": "0"}, false},
		{map[string]string{"timeout": "-1s"}, false},
		{map[string]string{"colour": "blue"}, false},
	}
	for _, tt := range tests {
		w := compaction.NewWorker()
		err := w.Provision(context.Background(), workers.Env{Settings: map[string]map[string]string{compaction.WorkerName: tt.settings}})
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, engine.ErrInvalidOption)) {
			t.Errorf("%v: %v", tt.settings, err)
		}
	}
}

// With no max_entry_size of its own, the worker follows the session
// tree's, when that is one it can take.
func TestEntryLimitFollowsTheSessionTree(t *testing.T) {
	t.Parallel()
	tests := []struct {
		own, session string
		want         int
	}{
		{"", "", compaction.DefaultMaxEntrySize},
		{"", "65536", 65536},
		{"131072", "65536", 131072},                  // its own wins
		{"", "1024", compaction.DefaultMaxEntrySize}, // below its range: not taken
		{"", "lots", compaction.DefaultMaxEntrySize}, // the tree refuses it itself
	}
	for _, tt := range tests {
		settings := map[string]map[string]string{"session": {}, compaction.WorkerName: {}}
		if tt.own != "" {
			settings[compaction.WorkerName][compaction.SettingMaxEntrySize] = tt.own
		}
		if tt.session != "" {
			settings["session"]["max_entry_size"] = tt.session
		}
		w := compaction.NewWorker()
		if err := w.Provision(context.Background(), workers.Env{Settings: settings}); err != nil {
			t.Fatalf("%+v: %v", tt, err)
		}
		if got, err := w.EntryLimit(); err != nil || got != tt.want {
			t.Errorf("%+v: entry limit %d, %v; want %d", tt, got, err, tt.want)
		}
	}
}

// The worker's lifecycle: one start, close idempotent, no start after
// close; the function is in the catalog with its schemas.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	if err := f.w.Start(ctx, f.e); !errors.Is(err, compaction.ErrStarted) {
		t.Fatalf("second start: %v", err)
	}
	fns, err := f.e.FunctionsList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, fn := range fns {
		if fn.ID == compaction.CompactFunction {
			found = len(fn.RequestSchema) > 0 && len(fn.ResponseSchema) > 0
		}
	}
	if !found {
		t.Fatal("compaction::compact is not in the catalog with its schemas")
	}
	if err := f.w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.w.Compact(ctx, compaction.CompactRequest{SessionID: "s", Provider: "scripted", Model: tinyModel}); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("compact after close: %v", err)
	}
	w2 := compaction.NewWorker()
	if err := w2.Start(ctx, f.e); err != nil {
		t.Fatalf("a second replica: %v", err)
	}
	if err := w2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w2.Start(ctx, f.e); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("start after close: %v", err)
	}
}

// The trigger binds its consumer again when it is deleted; with auto off
// there is no consumer at all.
func TestTriggerRebinds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	s := eventStream(t, f)
	enginetest.Eventually(t, 5*time.Second, func() error {
		_, err := s.Consumer(ctx, compaction.ConsumerName)
		return err
	})
	if err := s.DeleteConsumer(ctx, compaction.ConsumerName); err != nil {
		t.Fatal(err)
	}
	// Deleted under a pending pull: at once; before the first pull: after
	// two missed heartbeats.
	enginetest.Eventually(t, 10*time.Second, func() error {
		_, err := s.Consumer(ctx, compaction.ConsumerName)
		return err
	})
	sid := f.create(t)
	f.conversation(t, sid, 1, 32)
	publishEvent(t, f, turnEnd(sid, usable))
	enginetest.Eventually(t, 5*time.Second, func() error {
		if c := f.compactions(t, sid); len(c) != 1 {
			return fmt.Errorf("%d compactions", len(c))
		}
		return nil
	})

	off := newFixture(t, compaction.WithAuto(false))
	s2 := eventStream(t, off)
	if names := s2.ConsumerNames(ctx); names.Err() == nil {
		for n := range names.Name() {
			t.Fatalf("consumer %s with auto off", n)
		}
	}
}

// A consumer left by an older version (filter "iii.events.>") is updated
// in place to the per-copy consumer (no filter) and keeps triggering.
func TestTriggerUpdatesOldConsumer(t *testing.T) {
	t.Parallel()
	f := newFixture(t, compaction.WithAuto(false))
	ctx := ctxT(t)
	s := eventStream(t, f)
	if _, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: compaction.ConsumerName, FilterSubject: "iii.events.>", AckPolicy: jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverNewPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	w := compaction.NewWorker()
	if err := w.Start(ctx, f.e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	enginetest.Eventually(t, 5*time.Second, func() error {
		c, err := s.Consumer(ctx, compaction.ConsumerName)
		if err != nil {
			return err
		}
		if fs := c.CachedInfo().Config.FilterSubject; fs != "" {
			return fmt.Errorf("filter %q", fs)
		}
		return nil
	})
	sid := f.create(t)
	f.conversation(t, sid, 1, 32)
	publishEvent(t, f, turnEnd(sid, usable))
	drained(t, s, 1)
	if c := f.compactions(t, sid); len(c) != 1 {
		t.Fatalf("%d compactions", len(c))
	}
}

// A compaction's append carries a dedup id of the compaction (session,
// leaf, first kept entry): when the session tree stored it although the
// call failed (the lease lost, a timeout), a retry of the same compaction
// is answered the stored entry instead of storing a second summary.
func TestCompactionAppendIsDeduplicated(t *testing.T) {
	t.Parallel()
	f := newFixture(t, compaction.WithAuto(false))
	ctx := ctxT(t)
	sid := f.create(t)
	f.conversation(t, sid, 1, 32)
	leaf := f.view(t, sid).Leaf
	r, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid, Reason: compaction.ReasonOverflow})
	if err != nil || !r.Compacted {
		t.Fatalf("compact: %+v, %v", r, err)
	}
	id := compaction.CompactionDedupID(sid, leaf, r.FirstKeptEntryID)
	if err := subjects.ValidateID("dedup_id", id); err != nil {
		t.Fatal(err)
	}
	// The retry of the same compaction's append (another summary).
	again, err := engine.Call[sessiontree.AppendResponse](ctx, f.e, sessiontree.AppendFunction, sessiontree.AppendRequest{
		SessionID: sid, ParentID: leaf, DedupID: id,
		Entry: &sessiontree.Entry{Type: sessiontree.TypeCompaction, Summary: "a second summary", FirstKeptEntryID: r.FirstKeptEntryID},
	})
	if err != nil {
		t.Fatal(err)
	}
	if again.EntryID != r.EntryID {
		t.Fatalf("the retried append stored %s, the compaction %s", again.EntryID, r.EntryID)
	}
	if c := f.compactions(t, sid); len(c) != 1 {
		t.Fatalf("%d compaction entries", len(c))
	}
	if other := compaction.CompactionDedupID(sid, leaf, "e1"); other == id {
		t.Fatal("another first kept entry has the same dedup id")
	}
}

// A threshold compaction that panics (it runs on a goroutine of its own)
// is logged and acked: the process lives on and the trigger serves the
// next turn_end. Not parallel: it replaces the package's compaction.
func TestThresholdCompactionPanic(t *testing.T) {
	var calls atomic.Int32
	compaction.SetBackgroundCompact(t, func(context.Context, compaction.CompactRequest) (compaction.CompactResponse, error) {
		calls.Add(1)
		var m map[string]int
		m["boom"]++ // a nil map write: a runtime panic
		return compaction.CompactResponse{}, nil
	})
	f := newFixture(t)
	ctx := ctxT(t)
	s := eventStream(t, f)
	enginetest.Eventually(t, 5*time.Second, func() error {
		_, err := s.Consumer(ctx, compaction.ConsumerName)
		return err
	})
	big := f.create(t)
	publishEvent(t, f, turnEnd(big, usable+10))
	publishEvent(t, f, turnEnd(big, usable+20))
	drained(t, s, 2)
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d compactions ran, want 2", n)
	}
}

// A summary the model did not finish (cut by the output bound), one
// without text, or a failed call writes nothing: a coded error, the
// session as it was, the lease released.
func TestBadSummary(t *testing.T) {
	t.Parallel()
	f := newFixture(t, compaction.WithAuto(false))
	ctx := ctxT(t)
	tests := []struct {
		name  string
		model string
		msg   string
	}{
		{"provider fails", brokenModel, "broken"},
		{"cut by max_tokens", verboseModel, compaction.ErrTruncatedSummary.Error()},
		{"no text", thinkerModel, compaction.ErrEmptySummary.Error()},
	}
	for _, tt := range tests {
		sid := f.create(t)
		f.conversation(t, sid, 1, 32)
		before := f.view(t, sid)
		r, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid, Model: tt.model})
		if !errors.Is(err, wire.ErrInternal) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: %+v, %v; want internal containing %q", tt.name, r, err, tt.msg)
		}
		if c := f.compactions(t, sid); len(c) != 0 {
			t.Errorf("%s: %d compaction entries written, the first %.80q…", tt.name, len(c), c[0].Summary)
		}
		if after := f.view(t, sid); after.Leaf != before.Leaf || len(after.Messages) != len(before.Messages) {
			t.Errorf("%s: the session changed: leaf %s → %s, %d → %d messages", tt.name,
				before.Leaf, after.Leaf, len(before.Messages), len(after.Messages))
		}
		// The lease is released: a good model compacts at once.
		if r, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid}); err != nil || !r.Compacted {
			t.Errorf("%s: then with a good model: %+v, %v", tt.name, r, err)
		}
	}
}

// The active leaf moving while the summary is written: onto a branch
// that still holds the kept part, the compaction goes on top of it and
// the new message stays in the model's view; onto a branch that left
// the kept part behind, nothing is written and the answer is a conflict
// (the session changed, not the request), after which compacting the
// new path works.
func TestCompactWhileTheLeafMoves(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		branchAt int // the message (index into the view) the leaf moves to; -1: just an append
		conflict bool
	}{
		{"append", -1, false},
		{"branch inside the kept part", 29, false},
		{"branch inside the summarized part", 9, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, compaction.WithAuto(false))
			ctx := ctxT(t)
			sid := f.create(t)
			f.conversation(t, sid, 1, 32)
			v := f.view(t, sid)
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
			if tt.branchAt >= 0 {
				_, err := engine.Call[sessiontree.SetActiveLeafResponse](ctx, f.e, sessiontree.SetActiveLeafFunction,
					sessiontree.SetActiveLeafRequest{SessionID: sid, EntryID: v.Messages[tt.branchAt].EntryID})
				if err != nil {
					t.Fatal(err)
				}
			}
			newID := f.appendMsgs(t, sid, exchange(41, 50))[0]
			close(f.sum.gate)
			a := <-done
			if tt.conflict {
				if !errors.Is(a.err, wire.ErrConflict) || !strings.Contains(a.err.Error(), compaction.ErrPathChanged.Error()) {
					t.Fatalf("answered %+v, %v; want a conflict", a.r, a.err)
				}
				if c := f.compactions(t, sid); len(c) != 0 {
					t.Fatalf("%d compaction entries on the new path", len(c))
				}
				if r, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid}); err != nil {
					t.Fatalf("compacting the new path: %+v, %v", r, err)
				}
				return
			}
			if a.err != nil || !a.r.Compacted {
				t.Fatalf("answered %+v, %v", a.r, a.err)
			}
			after := f.view(t, sid)
			last := after.Messages[len(after.Messages)-1]
			if after.Messages[0].EntryID != a.r.EntryID || last.EntryID != newID || after.Leaf != a.r.EntryID {
				t.Fatalf("view after: first %s, last %s, leaf %s; compaction %s, new message %s",
					after.Messages[0].EntryID, last.EntryID, after.Leaf, a.r.EntryID, newID)
			}
			if p := after.Path[len(after.Path)-2]; p.EntryID != newID {
				t.Fatalf("the compaction's parent is %s, not the new message %s", p.EntryID, newID)
			}
		})
	}
}

// A path whose messages outgrow one answer of session::messages (over
// the server's 1 MiB max payload) is read page by page: the compaction
// sees, counts and summarises all of it. Before, the tree failed the
// read; once it paged, the first page alone would have been the session.
func TestCompactReadsEveryPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, compaction.WithAuto(false), compaction.WithReserveTokens(100_000))
	f.sum.hugeBytes.Store(1 << 10)
	sid := f.create(t)
	const n, size = 12, 100_000 // 1.2 MB of messages
	var ids []string
	for i := 1; i <= n; i++ {
		ids = append(ids, f.appendMsgs(t, sid, exchange(i, size))...)
	}
	r, err := f.compact(ctxT(t), compaction.CompactRequest{SessionID: sid, Model: hugeModel, KeepTokens: 30_000})
	if err != nil || !r.Compacted {
		t.Fatalf("%+v, %v", r, err)
	}
	if want := n * size / 4; r.TokensBefore < want {
		t.Fatalf("tokens before %d: the compaction did not see the whole path (≥ %d)", r.TokensBefore, want)
	}
	// What it kept is the newest turn (question n-1, answer n), read on
	// the last page.
	if r.FirstKeptEntryID != ids[n-2] {
		t.Fatalf("first kept %s, want the newest question %s", r.FirstKeptEntryID, ids[n-2])
	}
}
