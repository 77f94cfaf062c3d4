// Package traces is the trace store of iii: an OpenTelemetry span exporter
// that publishes every ended span onto the JetStream stream III_SPANS, and
// the "traces" worker module that follows that stream into a bounded
// in-memory store and serves it on the bus (SPEC §4):
//
//	engine::traces::group_by {attribute: "iii.session.id"|"iii.message.id"|"iii.function.id", since_ms?, limit?}
//	  → {groups: [{value, trace_ids[], trace_count, span_count, first_seen_ms, last_seen_ms, duration_ms, error_count}], truncated?}
//	engine::traces::tree {trace_id}
//	  → {trace_id, spans: [{span..., missing_parent?, detached?, children: [...]}], span_count, error_count, start_ms, duration_ms, truncated?}
//
// # Spans on the stream
//
// [Exporter] is an sdktrace.SpanExporter. The spans of one trace in an
// export batch become one message, a JSON array of [Span], on subject
// iii.spans.<trace id> of [StreamName] (limits retention, file storage,
// 24 h and 256 MiB by default, oldest dropped first); header
// Iii-Span-Count says how many. A trace's spans that do not fit one
// message (the server's max payload, at most [MaxSpanBytes], headers
// included) go in several; a span too large for a message on its own is
// sent trimmed ([Span.Trim]). A float attribute that is not finite is
// sent as the string OTLP's JSON writes for it ("NaN", "Infinity",
// "-Infinity"): JSON has no number for it. The store also takes a single span object
// per message ([DecodeSpans]), so any process can publish spans.
// Publishes are asynchronous within a window ([WithMaxPending]); a span that
// finds the window full is dropped and counted ([Exporter.Stats]), so
// tracing never holds up the traced code. Lost spans are logged at Warn,
// the first at once, then at most once a minute with the counts since.
// ForceFlush and Shutdown wait for the acknowledgements. Any process may export: the spans of every node
// meet in the one stream. A publish that finds no stream (deleted under a
// running node) has the exporter create it again in the background, one
// attempt at a time: at once, or, within 30 s of the last attempt, after
// 250 ms doubling up to 30 s. The spans published meanwhile are lost and
// counted.
//
// # The store
//
// [Open] (and the worker's Start) replays the stream from its first
// message with an ordered consumer, then follows it live: a restarted store
// rebuilds whatever the stream still keeps. When the stream is deleted
// and created again (its creation time changes, checked when the consume
// reports an error and every 30 s), the store follows the new stream from
// its first message ([StoreStats.Restarts]): the ordered consumer alone
// resumed after the old stream's last sequence, skipping as many new
// messages. The spans held stay, as when the stream is purged; a stream
// that is gone is waited for (checked with backoff, up to 30 s apart).
// The consumer pulls at most
// [MinReplayBytes] (8 MiB) or two max payloads of messages ahead of the
// store, whichever is more. The store holds at most
// [WithMaxSpans] spans (default 200,000) and [WithMaxBytes] bytes of them
// (default 256 MiB; a span is held as its JSON encoding and counted as
// such, with its group values, held apart), and evicts whole traces, oldest first, to make room. A span whose
// encoding is over [MaxStoredSpanBytes] (64 KiB), or nests deeper than
// [MaxStoredSpanDepth] (16 levels; an SDK span nests 5), is held trimmed
// ([Span.Trim]). Spans are deduplicated by trace and span id. The numbers
// of attributes (and of events, links and resource) are kept exact: an
// integer past 2^53 is not rounded. A span that
// ends more than [MaxClockSkew] in the future is refused; duration_ms is
// recomputed from the times.
//
// group_by skips spans that lack the attribute; groups come newest (latest
// span end) first. tree puts every span under its parent, children by
// start time. A span whose parent the store does not hold is a root with
// missing_parent: true (no separate orphan list). The children of a span
// [MaxTreeDepth] (100) levels below a root are roots too, with detached:
// true: each level nests the answer twice, and a msgpack caller refuses a
// reply nested past 256 levels. Links stay on their span.
// An answer never outgrows the bus's max payload, in JSON or msgpack:
// group_by leaves out the groups that do not fit, tree the latest spans
// (each counted at its larger encoding: msgpack writes a float in nine
// bytes), and both say truncated. A parent loop (bad data) is cut at its
// earliest span, a root with missing_parent; spans below the loop stay
// under their parents. Bad input is invalid_payload (an attribute outside the
// three, a trace id that is not 32 hex digits, since_ms past 2262), an
// unknown trace not_found.
//
// # Lifecycle
//
// The module registers itself in init; a node starts it by name
// ("traces"), with the settings max_spans, max_bytes, stream_max_age and
// stream_max_bytes. The exporter is wired by the node into its tracer
// provider:
//
//	x, err := traces.NewExporter(ctx, e)
//	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(traces.NewSpanProcessor(x)))
//	e2, err := engine.New(nc, engine.WithTracerProvider(tp))
//	defer tp.Shutdown(ctx) // flushes and waits for the acks
//
//	w := traces.NewWorker()
//	if err := w.Start(ctx, e); err != nil { ... }
//	defer w.Close(ctx)
//	res, err := engine.Call[traces.GroupByResponse](ctx, e, traces.GroupByFunction,
//		traces.GroupByRequest{Attribute: engine.AttrSessionID})
//
// From a shell:
//
//	nats req iii.fn.engine.traces.group_by '{"attribute":"iii.session.id"}'
//	nats req iii.fn.engine.traces.tree '{"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"}'
package traces
