// Package scripted is a deterministic, offline model provider: the worker
// "provider-scripted" serves provider::scripted::stream and
// provider::scripted::complete (SPEC §4 providers) without any network, so
// the turn loop runs end to end in tests, in the bench and in `iii up` when
// no real provider is configured.
//
// # Models
//
// Every provider serves the model "echo" ([Echo]), which any client drives
// with plain text: the latest user message is echoed back, except for
// command lines:
//
//	/call fs::read {"path":"/etc/hosts"}   a function call (several lines: parallel calls)
//	/fail rate_limited                     an error event of that kind
//	/sleep 200                             200 ms before the first token
//	/think let me see                      a thinking block
//
// Once the results of the calls are in, echo answers with one line per
// result ("function fs::read returned: …") and stops with "end". A sleep
// (at most [MaxSleep] in all) is a model thinking: the writer is marked
// busy for it (channel.Writer.Busy), so a sleep longer than the channel's
// idle timeout on either side ends in the answer, as a real provider's
// silent API does.
//
// Tests script other models in Go: [WithScript] binds a model name to a
// [ScriptFunc], and [Sequence] plays one [Reply] per model call (text,
// thinking, calls, a failure, a delay, a pace between deltas), indexed by
// the number of assistant messages already in the transcript, so it keeps
// no state and any replica answers alike.
//
// # Streams
//
// A stream writes one agent.ModelEvent per channel frame (with the
// request's event_batches, the events ready at once share a frame as an
// array; a delay or pace ends a frame): start, then per
// content block thinking_start/delta/end, text_start/delta/end and
// functioncall_start/delta/end (the deltas of a call are its JSON
// arguments), then usage, stop and done{message}; then it closes the
// channel. Deltas are at most [WithDeltaSize] bytes and never split a
// character. A scripted failure is one error event {kind, error} (with the
// partial message when something streamed first) before the channel's end,
// and the function replies {stop_reason: "error", kind}. A bad request or
// an unknown model is invalid_payload and writes nothing. A transcript
// that a vendor's API refuses (a function result that answers no call of
// the assistant message before it, or answers one a second time) is a
// permanent error event, as the vendor's HTTP 400 would be: tests of the
// harness fail where a real provider would. A reader that closes the
// channel stops the stream (the function answers canceled), even during
// a delay.
//
// Everything derives from the request: call ids ("call_<hash>_<n>", from
// the transcript's length and last message), usage (one token per four
// bytes of input and output, rounded up) and, with [WithClock], the
// timestamps; the same request gives the same events.
//
// # Lifecycle
//
// The package registers the module "provider-scripted" in init; workers/std
// links it. A node runs New, Provision (settings delta_size and
// delta_interval), Start (registers both functions) and Close (ends the
// calls in flight with unavailable, then stops the endpoints). Embedders
// and tests use [NewWorker] with their own [Provider]:
//
//	p, err := scripted.New(scripted.WithScript("two-step", scripted.Sequence(
//		scripted.Reply{Calls: []scripted.Call{{FunctionID: "fs::read", Arguments: map[string]any{"path": "/a"}}}},
//		scripted.Reply{Text: "done"},
//	)))
//	w := scripted.NewWorker(p)
//	if err := w.Start(ctx, e); err != nil { ... }
//	defer w.Close(ctx)
package scripted
