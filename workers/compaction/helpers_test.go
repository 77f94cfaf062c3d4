package compaction_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/compaction"
	"github.com/iii-on-nats/iii/workers/models"
	"github.com/iii-on-nats/iii/workers/scripted"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// The test models: every one has a 4000-token window, so a usable window
// of 3000 (reserve min(16384, 4000/4) = 1000) and a default keep of 750.
const (
	tinyModel   = "tiny"   // summarizes at once
	gatedModel  = "gated"  // summarizes once the test opens its gate
	brokenModel = "broken" // fails every call
	// gatedBrokenModel fails once the test opens its gate.
	gatedBrokenModel = "gated-broken"
	// verboseModel answers a summary longer than its output bound: the
	// provider cuts it (stop reason "length").
	verboseModel = "verbose"
	// thinkerModel answers a thinking block and no text.
	thinkerModel = "thinker"
	window       = 4000
	usable       = 3000
	keepDefault  = 750
	// hugeModel has a window of hugeWindow tokens and answers a summary
	// of summarizer.hugeBytes bytes ([summarizer.huge]).
	hugeModel  = "huge"
	hugeWindow = 400_000
	// summaryEnd ends every summary of hugeModel: a stored summary that
	// still ends with it (before its quote) was not shortened.
	summaryEnd = "END OF SUMMARY"
)

// summarizer is the scripted summarizer: it fails a request estimated
// above the usable window, records what it received and answers a
// summary that quotes it: the message markers ("m12") of the
// conversation it read, then the previous summary, verbatim.
type summarizer struct {
	calls     atomic.Int64
	hugeBytes atomic.Int64 // the size of hugeModel's summaries
	gate      chan struct{}
	mu        sync.Mutex
	prompts   []string
}

var markerRE = regexp.MustCompile(`\bm\d+\b`)

func (s *summarizer) script(gated, broken bool) scripted.ScriptFunc {
	return func(req scripted.StreamRequest) (scripted.Reply, error) {
		s.calls.Add(1)
		n := len(req.SystemPrompt)
		text := ""
		for _, m := range req.Messages {
			for _, c := range m.Content {
				n += len(c.Text)
				text += c.Text
			}
		}
		s.mu.Lock()
		s.prompts = append(s.prompts, text)
		s.mu.Unlock()
		if gated {
			<-s.gate
		}
		if broken {
			return scripted.Reply{}, fmt.Errorf("the summarizer is broken")
		}
		if tok := (n + 3) / 4; tok > usable {
			return scripted.Reply{}, fmt.Errorf("request of %d tokens exceeds the usable window %d", tok, usable)
		}
		if req.MaxTokens <= 0 || req.MaxTokens > window-usable {
			return scripted.Reply{}, fmt.Errorf("max_tokens %d outside the reserve", req.MaxTokens)
		}
		prev := between(text, "<previous-summary>\n", "\n</previous-summary>")
		conv := between(text, "<conversation>\n", "</conversation>")
		out := "## Goal\nseen: " + strings.Join(markerRE.FindAllString(conv, -1), " ")
		if prev != "" {
			out += "\n## Critical context\n" + prev
		}
		return scripted.Reply{Text: out}, nil
	}
}

// verbose is script(false, false) with a "Files" section longer than any
// output bound the worker asks for.
func (s *summarizer) verbose() scripted.ScriptFunc {
	inner := s.script(false, false)
	return func(req scripted.StreamRequest) (scripted.Reply, error) {
		r, err := inner(req)
		if err == nil {
			r.Text += "\n## Files\n" + strings.Repeat("- /src/file.go: read\n", 1000)
		}
		return r, err
	}
}

// huge answers hugeModel: the markers of the conversation it read, then
// a "Files" section filling the summary up to s.hugeBytes bytes, then
// [summaryEnd].
func (s *summarizer) huge() scripted.ScriptFunc {
	return func(req scripted.StreamRequest) (scripted.Reply, error) {
		s.calls.Add(1)
		text := ""
		for _, m := range req.Messages {
			for _, c := range m.Content {
				text += c.Text
			}
		}
		conv := between(text, "<conversation>\n", "</conversation>")
		out := "## Goal\nseen: " + strings.Join(markerRE.FindAllString(conv, -1), " ") + "\n## Files\n"
		if n := int(s.hugeBytes.Load()) - len(out) - len(summaryEnd); n > 0 {
			out += pad(n)
		}
		return scripted.Reply{Text: out + summaryEnd}, nil
	}
}

func (s *summarizer) lastPrompt() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.prompts) == 0 {
		return ""
	}
	return s.prompts[len(s.prompts)-1]
}

func (s *summarizer) allPrompts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.prompts...)
}

// words is the set of the whitespace-separated words of s.
func words(s string) map[string]bool {
	out := map[string]bool{}
	for _, w := range strings.Fields(s) {
		out[w] = true
	}
	return out
}

// firstMarker is the number of the marker a message's text starts with.
func firstMarker(t testing.TB, m agent.Message) int {
	t.Helper()
	var k int
	if _, err := fmt.Sscanf(m.Content[0].Text, "m%d ", &k); err != nil {
		t.Fatalf("message %.40q has no marker", m.Content[0].Text)
	}
	return k
}

func between(s, open, close string) string {
	i := strings.Index(s, open)
	if i < 0 {
		return ""
	}
	s = s[i+len(open):]
	if j := strings.Index(s, close); j >= 0 {
		return s[:j]
	}
	return s
}

type fixture struct {
	ns  *server.Server
	e   *engine.Engine
	w   *compaction.Worker
	sum *summarizer
}

// newFixture starts a server, the session tree, the models catalog (the
// test models), the scripted provider (the summarizer) and a compaction
// worker with opts.
func newFixture(t testing.TB, opts ...compaction.Option) *fixture {
	t.Helper()
	return newFixtureIn(t, "", opts...)
}

// newFixtureIn is newFixture on an engine of region ("" for none): its
// workers create their stores' copies for the sessions homed there.
func newFixtureIn(t testing.TB, region string, opts ...compaction.Option) *fixture {
	t.Helper()
	return newFixtureOn(t, enginetest.RunServer(t), region, opts...)
}

// newFixtureOn is newFixtureIn on server ns (one with a smaller max
// payload, say).
func newFixtureOn(t testing.TB, ns *server.Server, region string, opts ...compaction.Option) *fixture {
	t.Helper()
	var eopts []engine.Option
	if region != "" {
		eopts = append(eopts, engine.WithRegion(region))
	}
	e := enginetest.NewEngine(t, ns, eopts...)
	sum := &summarizer{gate: make(chan struct{})}
	p, err := scripted.New(
		scripted.WithScript(tinyModel, sum.script(false, false)),
		scripted.WithScript(gatedModel, sum.script(true, false)),
		scripted.WithScript(brokenModel, sum.script(false, true)),
		scripted.WithScript(gatedBrokenModel, sum.script(true, true)),
		scripted.WithScript(verboseModel, sum.verbose()),
		scripted.WithScript(hugeModel, sum.huge()),
		scripted.WithScript(thinkerModel, func(scripted.StreamRequest) (scripted.Reply, error) {
			return scripted.Reply{Thinking: "I would rather not."}, nil
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	var catalog []agent.Model
	for _, id := range []string{tinyModel, gatedModel, brokenModel, gatedBrokenModel, verboseModel, thinkerModel} {
		catalog = append(catalog, agent.Model{ID: id, Provider: scripted.ProviderName, ContextWindow: window, MaxOutputTokens: 2000})
	}
	catalog = append(catalog, agent.Model{ID: hugeModel, Provider: scripted.ProviderName, ContextWindow: hugeWindow, MaxOutputTokens: 128_000})
	w := compaction.NewWorker(opts...)
	closers := []interface {
		Start(context.Context, *engine.Engine) error
		Close(context.Context) error
	}{sessiontree.NewWorker(), models.NewWorker(models.WithCatalog(catalog)), scripted.NewWorker(p), w}
	for _, c := range closers {
		if err := c.Start(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		select {
		case <-sum.gate:
		default:
			close(sum.gate)
		}
		for i := len(closers) - 1; i >= 0; i-- {
			_ = closers[i].Close(ctx)
		}
	})
	return &fixture{ns: ns, e: e, w: w, sum: sum}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// create makes an empty session, named sid[0] when given (a session id
// "<region>.<name>" is homed in that region).
func (f *fixture) create(t testing.TB, sid ...string) string {
	t.Helper()
	var req sessiontree.CreateRequest
	if len(sid) > 0 {
		req.SessionID = sid[0]
	}
	r, err := engine.Call[sessiontree.CreateResponse](ctxT(t), f.e, sessiontree.CreateFunction, req)
	if err != nil {
		t.Fatal(err)
	}
	return r.SessionID
}

// appendMsgs appends msgs to the session's active leaf.
func (f *fixture) appendMsgs(t testing.TB, sid string, msgs ...agent.Message) []string {
	t.Helper()
	r, err := engine.Call[sessiontree.AppendBatchResponse](ctxT(t), f.e, sessiontree.AppendBatchFunction,
		sessiontree.AppendBatchRequest{SessionID: sid, Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	return r.EntryIDs
}

// view reads what the model sees.
func (f *fixture) view(t testing.TB, sid string) sessiontree.MessagesResponse {
	t.Helper()
	r, err := engine.Call[sessiontree.MessagesResponse](ctxT(t), f.e, sessiontree.MessagesFunction, sessiontree.ReadRequest{SessionID: sid})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (f *fixture) entries(t testing.TB, sid string) []sessiontree.Entry {
	t.Helper()
	r, err := engine.Call[sessiontree.EntriesResponse](ctxT(t), f.e, sessiontree.EntriesFunction, sessiontree.ReadRequest{SessionID: sid})
	if err != nil {
		t.Fatal(err)
	}
	return r.Entries
}

func (f *fixture) compactions(t testing.TB, sid string) []sessiontree.Entry {
	t.Helper()
	var out []sessiontree.Entry
	for _, en := range f.entries(t, sid) {
		if en.Type == sessiontree.TypeCompaction {
			out = append(out, en)
		}
	}
	return out
}

func (f *fixture) compact(ctx context.Context, req compaction.CompactRequest) (compaction.CompactResponse, error) {
	if req.Provider == "" {
		req.Provider = scripted.ProviderName
	}
	if req.Model == "" {
		req.Model = tinyModel
	}
	return engine.Call[compaction.CompactResponse](ctx, f.e, compaction.CompactFunction, req)
}

func viewMessages(v sessiontree.MessagesResponse) []agent.Message {
	out := make([]agent.Message, len(v.Messages))
	for i, m := range v.Messages {
		out[i] = m.Message
	}
	return out
}

// pad is filler that carries no marker.
func pad(n int) string { return strings.Repeat("x", n) }

// exchange is message i (a user question when i is odd, an answer when
// it is even) of about size bytes, starting with its marker "m<i>".
func exchange(i, size int) agent.Message {
	text := fmt.Sprintf("m%d %s", i, pad(size))
	if i%2 == 1 {
		return agent.UserText(text, 1)
	}
	return agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text(text)},
		StopReason: agent.StopEnd, Provider: scripted.ProviderName, Model: tinyModel, Timestamp: 1}
}

// conversation appends messages from..to (inclusive) of ~100 tokens
// each.
func (f *fixture) conversation(t testing.TB, sid string, from, to int) {
	t.Helper()
	var msgs []agent.Message
	for i := from; i <= to; i++ {
		msgs = append(msgs, exchange(i, 396))
	}
	f.appendMsgs(t, sid, msgs...)
}

func call(id, fn string, args map[string]any) agent.Message {
	return agent.Message{Role: agent.RoleAssistant, StopReason: agent.StopFunctionCall, Timestamp: 1,
		Content: []agent.Content{{Type: agent.ContentFunctionCall, ID: id, FunctionID: fn, Arguments: args}}}
}

func result(id, fn, text string) agent.Message {
	return agent.Message{Role: agent.RoleFunctionResult, FunctionCallID: id, FunctionID: fn,
		Content: []agent.Content{agent.Text(text)}, Timestamp: 1}
}
