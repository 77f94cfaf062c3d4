package anthropic

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/iii-on-nats/iii/agent"
)

// emitFunc receives each model event of a stream, in order. The event is
// only valid during the call (the translator reuses it). An error stops the
// stream.
type emitFunc func(ev *agent.ModelEvent) error

// translator turns the Messages API's stream events into model events and
// builds the assistant message on the way. It is one attempt's state and
// not safe for concurrent use.
type translator struct {
	names agent.ToolNames
	// model is the requested model, replaced by the one message_start
	// names (the API resolves aliases to the dated id).
	model string
	ts    int64

	started bool // message_start (or the first event) went out
	stopped bool // a stop event went out
	done    bool // message_stop went out as done

	usage agent.Usage
	stop  agent.StopReason

	// blocks maps the API's content index to ours: blocks of kinds that
	// have no agent.Content (server tools, their results) are skipped, so
	// the indexes differ once one was.
	blocks map[int64]*block
	order  []*block

	// bad is the error of the first tool_use block whose input did not
	// parse. It fails the answer once message_delta gives the usage and
	// the stop reason, unless the model was cut at max_tokens in the
	// middle of that block, the answer's last: the block is then dropped
	// and the answer stops with length, as the API's own SDK empties a
	// cut-off tool call's input.
	bad error
	// badBlock is that block; badCut says its input was cut short (not
	// JSON at all), as max_tokens leaves it.
	badBlock *block
	badCut   bool

	scratch agent.ModelEvent
	final   *agent.Message
}

// block is one content block being streamed.
type block struct {
	index int
	// api is the block's index in the API's stream.
	api  int64
	typ  agent.ContentType
	text strings.Builder // text, thinking, or the tool input's JSON
	// sig is a thinking block's signature (its signature_deltas).
	sig strings.Builder
	// data is a redacted_thinking block's encrypted thinking; set, the
	// block is a redacted one (a thinking block with Data and no text).
	data string
	id   string
	fn   string
	// input is the input content_block_start carried, used when no
	// input_json_delta follows.
	input map[string]any
	ended bool
	// dropped marks an ended tool_use block whose input did not parse:
	// it is not part of the message (see translator.bad).
	dropped bool
	c       agent.Content
}

func newTranslator(names agent.ToolNames, model string, ts int64) *translator {
	return &translator{names: names, model: model, ts: ts, blocks: map[int64]*block{}}
}

// malformed is a stream the translator cannot read.
func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformedStream, fmt.Sprintf(format, args...))
}

// event translates one stream event. It returns emit's error, or an
// [ErrMalformedStream] error for a stream that cannot be read.
func (t *translator) event(ev *streamEvent, emit emitFunc) error {
	if t.done {
		return nil
	}
	switch ev.Type {
	case "message_start":
		if ev.Message.Model != "" {
			t.model = ev.Message.Model
		}
		u := &ev.Message.Usage
		t.usage = agent.Usage{
			InputTokens:      count(u.InputTokens),
			OutputTokens:     count(u.OutputTokens),
			CacheReadTokens:  count(u.CacheReadInputTokens),
			CacheWriteTokens: count(u.CacheCreationInputTokens),
		}
		if err := t.start(emit); err != nil {
			return err
		}
		if t.usage != (agent.Usage{}) {
			usage := t.usage
			return emit(&agent.ModelEvent{Type: agent.ModelUsage, Usage: &usage})
		}
		return nil
	case "content_block_start":
		if err := t.start(emit); err != nil {
			return err
		}
		return t.blockStart(ev, emit)
	case "content_block_delta":
		return t.delta(ev, emit)
	case "content_block_stop":
		return t.blockStop(ev, emit)
	case "message_delta":
		if err := t.start(emit); err != nil {
			return err
		}
		return t.messageDelta(ev, emit)
	case "message_stop":
		if err := t.start(emit); err != nil {
			return err
		}
		if err := t.endBlocks(emit); err != nil {
			return err
		}
		if t.bad != nil {
			return t.bad
		}
		msg := t.message(false)
		if msg.StopReason == "" {
			msg.StopReason = t.defaultStop()
		}
		t.final, t.done = msg, true
		return emit(&agent.ModelEvent{Type: agent.ModelDone, Message: msg})
	}
	// ping and event types of later API versions.
	return nil
}

// start sends the start event once.
func (t *translator) start(emit emitFunc) error {
	if t.started {
		return nil
	}
	t.started = true
	return emit(&agent.ModelEvent{Type: agent.ModelStart, Message: &agent.Message{
		Role: agent.RoleAssistant, Content: []agent.Content{}, Timestamp: t.ts, Model: t.model, Provider: ProviderName,
	}})
}

func (t *translator) blockStart(ev *streamEvent, emit emitFunc) error {
	cb := &ev.ContentBlock
	if _, dup := t.blocks[ev.Index]; dup {
		return malformed("content block %d started twice", ev.Index)
	}
	b := &block{index: len(t.order), api: ev.Index}
	var initial string
	e := &t.scratch
	*e = agent.ModelEvent{Index: b.index}
	switch cb.Type {
	case "text":
		b.typ, e.Type, initial = agent.ContentText, agent.ModelTextStart, cb.Text
	case "thinking":
		b.typ, e.Type, initial = agent.ContentThinking, agent.ModelThinkingStart, cb.Thinking
	case "redacted_thinking":
		// Encrypted thinking: no text to show, but the API wants it back
		// as it came, so it travels as a thinking block with Data. One
		// without data could not go back: it is skipped.
		if cb.Data == "" {
			return nil
		}
		b.typ, b.data, e.Type = agent.ContentThinking, cb.Data, agent.ModelThinkingStart
	case "tool_use":
		b.typ, b.id, b.fn = agent.ContentFunctionCall, cb.ID, t.names.FunctionID(cb.Name)
		if err := agent.ValidateCallID(b.id); err != nil {
			return malformed("tool_use block %d: %v", ev.Index, err)
		}
		if cb.Name == "" {
			return malformed("tool_use block %d has no name", ev.Index)
		}
		if len(cb.Input) > 2 { // more than {}
			in, err := agent.DecodeArguments(cb.Input)
			if err != nil {
				return malformed("tool_use block %d: input is not a JSON object: %v", ev.Index, err)
			}
			if len(in) > 0 {
				b.input = in
			}
		}
		e.Type, e.ID, e.FunctionID = agent.ModelFunctionCallStart, b.id, b.fn
	default:
		// server_tool_use, web search results...: not content the harness
		// can carry.
		return nil
	}
	t.blocks[ev.Index] = b
	t.order = append(t.order, b)
	if err := emit(e); err != nil {
		return err
	}
	if initial != "" {
		return t.appendDelta(b, initial, emit)
	}
	return nil
}

func (t *translator) delta(ev *streamEvent, emit emitFunc) error {
	b := t.blocks[ev.Index]
	if b == nil || b.ended {
		return nil // a skipped block's, or a stray one
	}
	d := &ev.Delta
	switch {
	case d.Type == "text_delta" && b.typ == agent.ContentText:
		return t.appendDelta(b, d.Text, emit)
	case d.Type == "thinking_delta" && b.typ == agent.ContentThinking && b.data == "":
		return t.appendDelta(b, d.Thinking, emit)
	case d.Type == "signature_delta" && b.typ == agent.ContentThinking && b.data == "":
		// No event: the signature is the finished block's (thinking_end).
		b.sig.WriteString(d.Signature)
		return nil
	case d.Type == "input_json_delta" && b.typ == agent.ContentFunctionCall:
		return t.appendDelta(b, d.PartialJSON, emit)
	}
	// citations_delta: nothing to carry.
	return nil
}

func (t *translator) appendDelta(b *block, s string, emit emitFunc) error {
	if s == "" {
		return nil
	}
	b.text.WriteString(s)
	e := &t.scratch
	*e = agent.ModelEvent{Index: b.index, Delta: s}
	switch b.typ {
	case agent.ContentText:
		e.Type = agent.ModelTextDelta
	case agent.ContentThinking:
		e.Type = agent.ModelThinkingDelta
	default:
		e.Type = agent.ModelFunctionCallDelta
	}
	return emit(e)
}

func (t *translator) blockStop(ev *streamEvent, emit emitFunc) error {
	b := t.blocks[ev.Index]
	if b == nil || b.ended {
		return nil
	}
	e := &agent.ModelEvent{Index: b.index, Content: &b.c}
	switch b.typ {
	case agent.ContentText:
		b.c = agent.Content{Type: agent.ContentText, Text: b.text.String()}
		e.Type = agent.ModelTextEnd
	case agent.ContentThinking:
		b.c = agent.Content{Type: agent.ContentThinking, Text: b.text.String(), Signature: b.sig.String(), Data: b.data}
		e.Type = agent.ModelThinkingEnd
	default:
		var bad error
		args, err := parseArguments(b.text.String(), b.input)
		if err == nil {
			b.c = agent.Content{Type: agent.ContentFunctionCall, ID: b.id, FunctionID: b.fn, Arguments: args}
			if err := b.c.Validate(); err != nil {
				bad = malformed("call %s: %v", b.id, err)
			}
		} else {
			bad = malformed("the input of call %s (%s): %v", b.id, b.fn, err)
		}
		if bad != nil {
			// Held until message_delta: it may say max_tokens cut the
			// call, and it carries the output tokens the failure costs.
			b.ended, b.dropped, b.c = true, true, agent.Content{}
			if t.bad == nil {
				t.bad, t.badBlock = bad, b
				t.badCut = err != nil && !json.Valid([]byte(b.text.String()))
			}
			return nil
		}
		e.Type = agent.ModelFunctionCallEnd
	}
	b.ended = true
	return emit(e)
}

// parseArguments reads a tool input: the streamed JSON, or the input of
// content_block_start when nothing streamed; empty or null is {}. Anything
// but a JSON object is an error.
func parseArguments(js string, initial map[string]any) (map[string]any, error) {
	js = strings.TrimSpace(js)
	if js == "" {
		if initial != nil {
			return initial, nil
		}
		return map[string]any{}, nil
	}
	args, err := agent.DecodeArguments([]byte(js))
	if err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	if args == nil {
		args = map[string]any{}
	}
	return args, nil
}

// endBlocks ends the blocks the stream left open, in their order, as
// content_block_stop would: once the model stopped (message_delta gave the
// stop reason, or message_stop came), a block without its stop is whole,
// and a call left open would otherwise be missing from a message that
// stops with function_call, after its functioncall_start went out.
func (t *translator) endBlocks(emit emitFunc) error {
	for _, b := range t.order {
		if !b.ended {
			if err := t.blockStop(&streamEvent{Type: "content_block_stop", Index: b.api}, emit); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *translator) messageDelta(ev *streamEvent, emit emitFunc) error {
	if ev.Delta.StopReason != "" {
		if err := t.endBlocks(emit); err != nil {
			return err
		}
	}
	u := &ev.Usage
	if u.OutputTokens != nil {
		t.usage.OutputTokens = max(*u.OutputTokens, 0)
	}
	// Later API versions repeat the input counts here (cumulative).
	if n := count(u.InputTokens); n > 0 {
		t.usage.InputTokens = n
	}
	if n := count(u.CacheReadInputTokens); n > 0 {
		t.usage.CacheReadTokens = n
	}
	if n := count(u.CacheCreationInputTokens); n > 0 {
		t.usage.CacheWriteTokens = n
	}
	if r := ev.Delta.StopReason; r != "" {
		t.stop = stopReason(r)
	}
	if t.bad != nil && t.stop != "" {
		if t.stop != agent.StopLength || !t.badCut || t.order[len(t.order)-1] != t.badBlock {
			return t.bad
		}
		// max_tokens cut the answer's last call short: it is dropped,
		// and the answer stops with length.
		t.bad, t.badBlock = nil, nil
	}
	usage := t.usage
	if err := emit(&agent.ModelEvent{Type: agent.ModelUsage, Usage: &usage}); err != nil {
		return err
	}
	if t.stop == "" || t.stopped {
		return nil
	}
	t.stopped = true
	return emit(&agent.ModelEvent{Type: agent.ModelStop, StopReason: t.stop})
}

// count reads a token count the event may leave out; a negative one (a
// broken proxy's) counts as none, as a missing one does.
func count(n *int64) int64 {
	if n == nil {
		return 0
	}
	return max(*n, 0)
}

// stopReason maps the API's stop reason. A refusal ends the answer with the
// text so far; pause_turn (a server tool's long turn) ends it too.
func stopReason(r string) agent.StopReason {
	switch r {
	case "max_tokens", "model_context_window_exceeded":
		return agent.StopLength
	case "tool_use":
		return agent.StopFunctionCall
	default: // end_turn, stop_sequence, refusal, pause_turn, later ones
		return agent.StopEnd
	}
}

// defaultStop is the stop reason of a stream that never said: function_call
// when it holds calls, else end.
func (t *translator) defaultStop() agent.StopReason {
	for _, b := range t.order {
		if b.typ == agent.ContentFunctionCall && b.ended && !b.dropped {
			return agent.StopFunctionCall
		}
	}
	return agent.StopEnd
}

// message is the assistant message so far: finished blocks, and with
// partial set the text of unfinished text and thinking blocks too (a call
// whose input did not finish is left out). An unfinished thinking block
// has no signature, even when its signature already streamed: only a
// finished block is sent back to the API as it came; an unfinished
// redacted one has its data, which comes whole with its start.
func (t *translator) message(partial bool) *agent.Message {
	content := make([]agent.Content, 0, len(t.order))
	for _, b := range t.order {
		switch {
		case b.dropped:
		case b.ended:
			content = append(content, b.c)
		case b.data != "":
			content = append(content, agent.Content{Type: agent.ContentThinking, Data: b.data})
		case b.typ != agent.ContentFunctionCall && (partial || b.text.Len() > 0):
			content = append(content, agent.Content{Type: b.typ, Text: b.text.String()})
		}
	}
	usage := t.usage
	return &agent.Message{
		Role: agent.RoleAssistant, Content: content, Timestamp: t.ts, StopReason: t.stop,
		Usage: &usage, Model: t.model, Provider: ProviderName,
	}
}

// partial is the message an error event carries: what streamed so far,
// stopped with "error"; nil when nothing streamed.
func (t *translator) partial(errText string) *agent.Message {
	if !t.started {
		return nil
	}
	msg := t.message(true)
	msg.StopReason, msg.ErrorMessage = agent.StopError, errText
	return msg
}
