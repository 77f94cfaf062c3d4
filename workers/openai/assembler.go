package openai

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nuid"

	"github.com/iii-on-nats/iii/agent"
)

// maxCalls bounds the tool calls of one answer.
const maxCalls = 128

// assembler turns the chunks of one streamed answer into model events and
// the final assistant message. Events go to emit, which must not keep one
// past its call (delta events are reused); the start event is held back
// until the first event that carries something, so a request that fails
// before any content (a dropped connection, an error chunk) has written
// nothing and may be retried.
type assembler struct {
	provider string
	model    string
	ts       int64
	names    agent.ToolNames
	emit     func(*agent.ModelEvent) error
	log      *slog.Logger

	started  bool // the start event went out
	blocks   []*block
	open     *block          // the open text or thinking block
	calls    map[int64]*call // by index: the call the index's next fragments extend
	ncalls   int
	ids      map[string]bool
	usage    agent.Usage
	hasUsage bool
	finish   string // the finish_reason once it came
	done     bool   // a finish_reason came: the answer is complete

	// scratch is the delta event, reused: emit must not keep an event
	// past its call.
	scratch agent.ModelEvent
}

// block is one content block of the answer, in the order it started.
type block struct {
	index int
	typ   agent.ContentType
	text  strings.Builder
	call  *call
}

// call is one tool call, by the index the server gave it.
type call struct {
	index int64
	block *block // nil until the call has a name
	id    string
	// raw is the id the server gave, "" until it gave one.
	raw   string
	name  string
	args  strings.Builder
	final *agent.Content // the finished function_call block
}

func newAssembler(provider, model string, ts int64, names agent.ToolNames, log *slog.Logger, emit func(*agent.ModelEvent) error) *assembler {
	return &assembler{provider: provider, model: model, ts: ts, names: names, log: log, emit: emit}
}

// send emits ev, after the start event the first time.
func (a *assembler) send(ev *agent.ModelEvent) error {
	if !a.started {
		a.started = true
		start := &agent.ModelEvent{Type: agent.ModelStart, Message: &agent.Message{
			Role: agent.RoleAssistant, Content: []agent.Content{}, Timestamp: a.ts, Model: a.model, Provider: a.provider,
		}}
		if err := a.emit(start); err != nil {
			return err
		}
	}
	return a.emit(ev)
}

// chunk applies one chunk. It returns a *failure for an answer that
// cannot be used (too many calls, arguments that are not a JSON object),
// or emit's error.
func (a *assembler) chunk(c *chunk) error {
	if c.Usage != nil {
		a.setUsage(c.Usage)
	}
	for i := range c.Choices {
		ch := &c.Choices[i]
		if ch.Index != 0 {
			continue // n is 1: other choices are not ours
		}
		if ch.Usage != nil {
			a.setUsage(ch.Usage)
		}
		if a.done {
			continue
		}
		d := &ch.Delta
		if err := a.text(agent.ContentThinking, d.thinking()); err != nil {
			return err
		}
		if err := a.text(agent.ContentText, d.Content); err != nil {
			return err
		}
		if err := a.text(agent.ContentText, d.Refusal); err != nil {
			return err
		}
		for j := range d.ToolCalls {
			if err := a.toolCall(&d.ToolCalls[j]); err != nil {
				return err
			}
		}
		if ch.FinishReason != "" {
			if err := a.finishWith(ch.FinishReason); err != nil {
				return err
			}
		}
	}
	return nil
}

// setUsage takes the server's counts; a negative one (a broken server's)
// counts as none.
func (a *assembler) setUsage(u *chunkUsage) {
	cached := max(u.cached(), 0)
	a.usage = agent.Usage{InputTokens: max(u.PromptTokens-cached, 0), OutputTokens: max(u.CompletionTokens, 0), CacheReadTokens: cached}
	a.hasUsage = true
}

// text appends a text or thinking delta, opening a block of that type
// (and closing the open one) when needed.
func (a *assembler) text(typ agent.ContentType, delta string) error {
	if delta == "" {
		return nil
	}
	startT, deltaT := agent.ModelTextStart, agent.ModelTextDelta
	if typ == agent.ContentThinking {
		startT, deltaT = agent.ModelThinkingStart, agent.ModelThinkingDelta
	}
	if a.open == nil || a.open.typ != typ {
		if err := a.closeOpen(); err != nil {
			return err
		}
		b := &block{index: len(a.blocks), typ: typ}
		a.blocks = append(a.blocks, b)
		a.open = b
		if err := a.send(&agent.ModelEvent{Type: startT, Index: b.index}); err != nil {
			return err
		}
	}
	a.open.text.WriteString(delta)
	return a.sendDelta(deltaT, a.open.index, delta)
}

// sendDelta emits a delta event (the scratch one).
func (a *assembler) sendDelta(typ agent.ModelEventType, index int, delta string) error {
	a.scratch = agent.ModelEvent{Type: typ, Index: index, Delta: delta}
	return a.send(&a.scratch)
}

// closeOpen ends the open text or thinking block.
func (a *assembler) closeOpen() error {
	b := a.open
	if b == nil {
		return nil
	}
	a.open = nil
	endT := agent.ModelTextEnd
	if b.typ == agent.ContentThinking {
		endT = agent.ModelThinkingEnd
	}
	return a.send(&agent.ModelEvent{Type: endT, Index: b.index, Content: &agent.Content{Type: b.typ, Text: b.text.String()}})
}

// toolCall applies one tool call fragment: the id and the name come in the
// first fragment of an index, the arguments in pieces. The call starts
// (functioncall_start) once it has a name; argument fragments that came
// before go out as one delta then. A fragment with a name and an id that
// differs from the id of the started call of its index is a new call:
// ollama (and other servers) give every call of a parallel batch index 0,
// or no index, and only the first fragments' ids tell them apart. (A
// later fragment without a name is the call's own, whatever its id: some
// servers change the id after the first fragment.)
func (a *assembler) toolCall(tc *chunkToolCall) error {
	c := a.calls[tc.Index]
	if c != nil && c.block != nil && c.raw != "" && tc.ID != "" && tc.ID != c.raw && tc.Function.Name != "" {
		c = nil
	}
	if c == nil {
		if a.ncalls == maxCalls {
			return &failure{kind: agent.ErrorPermanent, text: fmt.Sprintf("%s: the model made more than %d tool calls", a.provider, maxCalls)}
		}
		if a.calls == nil {
			a.calls = make(map[int64]*call)
		}
		c = &call{index: tc.Index}
		a.calls[tc.Index] = c
		a.ncalls++
	}
	if c.raw == "" {
		c.raw = tc.ID
	}
	if c.id == "" {
		c.id = tc.ID
	}
	args := tc.Function.Arguments
	c.args.WriteString(args)
	if c.block != nil {
		if args == "" {
			return nil
		}
		return a.sendDelta(agent.ModelFunctionCallDelta, c.block.index, args)
	}
	if tc.Function.Name == "" {
		return nil
	}
	if err := a.closeOpen(); err != nil {
		return err
	}
	c.name = tc.Function.Name
	c.id = a.callID(c.id)
	b := &block{index: len(a.blocks), typ: agent.ContentFunctionCall, call: c}
	a.blocks = append(a.blocks, b)
	c.block = b
	if err := a.send(&agent.ModelEvent{Type: agent.ModelFunctionCallStart, Index: b.index, ID: c.id, FunctionID: a.functionID(c.name)}); err != nil {
		return err
	}
	if c.args.Len() == 0 {
		return nil
	}
	return a.sendDelta(agent.ModelFunctionCallDelta, b.index, c.args.String())
}

// functionID maps a tool name the model used back to a function id. A
// name that does not map to a valid function id (the model made it up) is
// sanitized first, so the call reaches the orchestrator, which answers it
// as an unknown function.
func (a *assembler) functionID(name string) string {
	fn := a.names.FunctionID(name)
	if (agent.Content{Type: agent.ContentFunctionCall, ID: "x", FunctionID: fn}).Validate() != nil {
		fn = a.names.FunctionID(agent.ToolName(name))
	}
	return fn
}

// callID is the id of a call: the server's, made valid for
// agent.ValidateCallID ('_' for the characters it refuses), a fresh one
// when the server sent none, and unique within the answer.
func (a *assembler) callID(raw string) string {
	id := sanitizeCallID(raw)
	if id == "" {
		id = "call_" + nuid.Next()
	}
	if a.ids == nil {
		a.ids = make(map[string]bool)
	}
	base := id
	for n := 2; a.ids[id]; n++ {
		suffix := "_" + strconv.Itoa(n)
		id = truncate(base, agent.MaxIDLen-len(suffix)) + suffix
	}
	a.ids[id] = true
	return id
}

// sanitizeCallID replaces what agent.ValidateCallID refuses with '_' and
// cuts the id to agent.MaxIDLen bytes.
func sanitizeCallID(id string) string {
	if id == "" || agent.ValidateCallID(id) == nil {
		return id
	}
	id = strings.ToValidUTF8(id, "_")
	id = strings.Map(func(r rune) rune {
		if r == '/' || r == '.' || r == '*' || r == '>' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return '_'
		}
		return r
	}, id)
	return truncate(id, agent.MaxIDLen)
}

// truncate cuts s to at most n bytes on a character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// finishWith ends the answer: the open block closes and every call ends
// with its parsed arguments. A call whose arguments are not a JSON object
// fails the answer, except when the answer was cut at max_tokens
// (finish_reason "length"): the cut call is dropped and the answer stops
// with "length".
func (a *assembler) finishWith(reason string) error {
	a.done, a.finish = true, reason
	if err := a.closeOpen(); err != nil {
		return err
	}
	for _, c := range a.calls {
		if c.block == nil && reason != "length" {
			return &failure{kind: agent.ErrorPermanent, text: fmt.Sprintf("%s: the model's tool call #%d has no function name", a.provider, c.index)}
		}
	}
	for _, b := range a.blocks {
		c := b.call
		if c == nil {
			continue
		}
		args, err := parseArguments(c.args.String())
		if err != nil {
			if reason == "length" {
				a.log.Debug("openai: a tool call cut at max_tokens is dropped", "call_id", c.id)
				continue
			}
			return &failure{kind: agent.ErrorPermanent, text: fmt.Sprintf("%s: the arguments of tool call %s (%s) are not a JSON object: %v", a.provider, c.id, c.name, err)}
		}
		c.final = &agent.Content{Type: agent.ContentFunctionCall, ID: c.id, FunctionID: a.functionID(c.name), Arguments: args}
		if err := a.send(&agent.ModelEvent{Type: agent.ModelFunctionCallEnd, Index: b.index, Content: c.final}); err != nil {
			return err
		}
	}
	return nil
}

// parseArguments parses a call's arguments: a JSON object, or nothing
// (empty, null) for no arguments.
func parseArguments(s string) (map[string]any, error) {
	if strings.TrimSpace(s) == "" {
		return map[string]any{}, nil
	}
	args, err := agent.DecodeArguments([]byte(s))
	if err != nil {
		return nil, err
	}
	if args == nil {
		args = map[string]any{}
	}
	return args, nil
}

// message is the answer so far: its blocks (calls only once they ended),
// with stop reason stop.
func (a *assembler) message(stop agent.StopReason) *agent.Message {
	content := make([]agent.Content, 0, len(a.blocks))
	for _, b := range a.blocks {
		switch {
		case b.call != nil:
			if b.call.final != nil {
				content = append(content, *b.call.final)
			}
		default:
			content = append(content, agent.Content{Type: b.typ, Text: b.text.String()})
		}
	}
	usage := a.usage
	return &agent.Message{
		Role: agent.RoleAssistant, Content: content, Timestamp: a.ts, StopReason: stop,
		Usage: &usage, Model: a.model, Provider: a.provider,
	}
}

// stopReason maps the finish_reason. A server that says "stop" after tool
// calls (older ollama) still asked for them; content_filter ends the
// answer as it is.
func (a *assembler) stopReason() agent.StopReason {
	calls := false
	for _, b := range a.blocks {
		if b.call != nil && b.call.final != nil {
			calls = true
			break
		}
	}
	switch {
	case a.finish == "length":
		return agent.StopLength
	case calls:
		return agent.StopFunctionCall
	}
	return agent.StopEnd
}

// complete ends a finished answer: usage (when the server sent it), stop
// and done. It returns the final message.
func (a *assembler) complete() (*agent.Message, error) {
	stop := a.stopReason()
	switch a.finish {
	case "stop", "length", "tool_calls", "function_call":
	case "content_filter":
		a.log.Warn("openai: the answer was cut by the content filter")
	default:
		a.log.Debug("openai: unknown finish_reason", "finish_reason", a.finish)
	}
	msg := a.message(stop)
	if a.hasUsage {
		u := a.usage
		if err := a.send(&agent.ModelEvent{Type: agent.ModelUsage, Usage: &u}); err != nil {
			return nil, err
		}
	}
	if err := a.send(&agent.ModelEvent{Type: agent.ModelStop, StopReason: stop}); err != nil {
		return nil, err
	}
	if err := a.send(&agent.ModelEvent{Type: agent.ModelDone, Message: msg}); err != nil {
		return nil, err
	}
	return msg, nil
}

// fail ends the answer with an error event: alone when nothing streamed,
// with the partial message otherwise.
func (a *assembler) fail(f *failure) error {
	ev := &agent.ModelEvent{Type: agent.ModelError, Kind: f.kind, Error: f.text, RetryAfterMs: f.retryAfter.Milliseconds()}
	if !a.started {
		return a.emit(ev)
	}
	msg := a.message(agent.StopError)
	msg.ErrorMessage = f.text
	ev.Message = msg
	return a.emit(ev)
}
