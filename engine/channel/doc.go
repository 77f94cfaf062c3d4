// Package channel streams frames from one function to another over core
// NATS: an ordered, one-way, flow-controlled stream with an explicit end.
// A model provider writes its token events into a channel; the orchestrator
// that called it reads them as they come. Nothing is persisted (no
// JetStream), so a frame costs one publish.
//
// # Lifecycle
//
// The reader opens the channel with [Open]. Open picks a fresh id and
// subscribes before returning, so the id can be handed to a writer (usually
// in the payload of the function call that will write) without any frame
// being missed. The writer attaches with [NewWriter], sends frames with
// [Writer.Write], and ends the stream with [Writer.Close] (clean end) or
// [Writer.Fail] (an error for the reader). The reader calls [Reader.Next]
// until it returns an error: [ErrEnd] after a clean end, or the failure;
// then it calls [Reader.Close]. Closing the reader early tells the writer
// to stop: its next Write returns [ErrReaderGone]. Either side's Close
// releases a call of the same side blocked in another goroutine: a Next
// returns [ErrClosed], and a Write waiting for credit returns [ErrClosed]
// while Close or Fail sends the terminal frame.
//
//	r, err := channel.Open(ctx, e)
//	defer r.Close()
//	go e.Trigger(ctx, "provider::scripted::stream", Req{Channel: r.ID()}, nil)
//	for {
//		f, err := r.Next(ctx)
//		if errors.Is(err, channel.ErrEnd) {
//			break
//		}
//		if err != nil {
//			return err // a gap, an idle timeout, or the writer's error
//		}
//		var ev Event
//		if err := f.Decode(&ev); err != nil { ... }
//	}
//
// and in the provider:
//
//	w, err := channel.NewWriter(e, req.Channel)
//	if err != nil {
//		return nil, err // invalid_payload
//	}
//	defer w.Close(ctx) // a no-op after Fail
//	for ev := range events {
//		if err := w.Write(ctx, ev); err != nil {
//			// ErrReaderGone: the orchestrator gave up, and Fail sends
//			// nothing. Otherwise the reader gets the error, not a clean
//			// end after a truncated stream.
//			_ = w.Fail(ctx, err)
//			return nil, err
//		}
//	}
//
// The idle timeout ([WithIdleTimeout], 60 s by default) is the longest
// silence either side tolerates. A reader waits that long for a frame or a
// keep-alive ([ErrIdleTimeout]). A writer that sends nothing for that long
// with no call in progress (its owner forgot Close, or is stuck) ends the
// stream itself: the reader gets a timeout error frame (an error wrapping
// [ErrWriterFailed] and the timeout wire error), the writer's subscription
// goes, its [Writer.Gone] is closed, and its calls return
// [ErrIdleTimeout] ([ErrReaderGone] if the reader had left first). So a
// forgotten writer holds its subscription for at most an idle timeout and
// an eighth after its last frame, not until its connection closes.
//
// # Keep-alive
//
// A writer's owner that waits on something bounding its own silence (a
// model provider waiting for an API that may think for minutes, under the
// provider's own idle timeout and retries) marks the wait with
// [Writer.Busy]. Until it is done, the writer's idle timeout does not run
// and the writer keeps its reader waiting: over the bus it answers each
// of the reader's liveness probes with a keep-alive, which restarts the
// reader's idle timeout; a local writer's reader looks at it directly.
// Once the owner is done, the reader's idle timeout counts from the end of
// the section (over the bus, from the last keep-alive: at most a probe
// interval earlier), never from an older look. So
// the owner's bound applies to that silence, whatever the channel's idle
// timeout on either side, and the channel's catches only a writer that
// stopped answering: its process stuck, or one older than keep-alives. A
// writer whose process died is still noticed within seconds (the probe
// finds nobody: [ErrWriterGone]).
//
//	done := w.Busy()
//	resp, err := callTheAPI(ctx) // bounded by its own idle timeout
//	done()
//
// # Protocol
//
// A channel id is 1–128 characters of [A-Za-z0-9_-] (subjects.ValidateID).
// A channel uses three subjects; any NATS client can take either side:
//
//	iii.ch.<id>        frames, writer → reader
//	iii.ch.<id>.ack    credit and cancel, reader → writer
//	iii.ch.<id>.ping   credit requests, writer → reader (request/reply)
//
// The rules:
//
//   - Every frame has headers [HeaderSeq] (1, 2, 3, … in canonical
//     decimal, terminal frames included), [HeaderKind] ("data", "end" or
//     "error") and Content-Type (application/msgpack or application/json;
//     none means JSON). Frame 1 also carries the writer's trace context
//     (traceparent, tracestate, baggage).
//   - A "data" frame's body is one payload. An "end" frame has no body. An
//     "error" frame carries the wire error envelope
//     {"error":{"code","message","retryable","details"}} and the
//     Nats-Service-Error / Nats-Service-Error-Code headers, as a function's
//     error reply does. After "end" or "error" the writer sends nothing.
//   - Flow control is by credit: {[HeaderKind]: "credit", [HeaderCredit]: N,
//     [HeaderCreditBytes]: M} on the ack subject means "you may send data
//     frames up to sequence N, each while the payload bytes of the data
//     frames sent before it are below M". Credit is cumulative (a writer
//     keeps the highest N and M it has seen), so a lost or repeated grant
//     is harmless. Frame 1 needs no credit, and terminal frames need none.
//     The reader grants consumed+window frames and consumed+byte window
//     bytes after frame 1 (unless it has answered a ping already: the
//     writer knows the windows then) and whenever a quarter of either
//     window ([WithWindow], [WithByteWindow]) has been consumed since the
//     last grant, so a writer is never more than window frames, nor more
//     than the byte window plus one frame, ahead of what the reader has
//     consumed. [HeaderCreditBytes] is optional: a writer that never saw
//     one (from a reader older than byte credit) has no byte limit. A
//     reader holds at most 2 × window + 16 frames and 2 × byte window + 2
//     × the server's max payload bytes (and 256 bytes of subject and
//     headers per frame), counted as the frames arrive: a writer that
//     ignores byte credit is read while it stays within that, and one that
//     goes past it (ignoring credit altogether) is cut off there: its
//     later frames are dropped and the reader fails with [ErrGap] after
//     the frames it kept.
//   - A writer subscribes to the ack subject, then publishes
//     {[HeaderKind]: "ping"} on the ping subject with the ack subject as
//     reply subject. The reader answers with its current credit (window,
//     before it has consumed anything), or with cancel once it is done; when
//     no reader listens, the server's no-responders status (503) arrives
//     instead, which means the reader is gone. A Go writer pings when it
//     attaches and again every quarter of its idle timeout (at most every
//     500 ms) while it waits for credit, which recovers lost grants and
//     notices a reader whose process died.
//   - Liveness: while a reader waits for a frame, it probes an attached
//     writer every quarter of its idle timeout (250 ms–2 s) with its
//     current credit on the ack subject and a reply subject of its own.
//     The server's no-responders status (503) there means the writer's
//     connection is gone ([ErrWriterGone]). A writer whose owner is busy
//     ([Writer.Busy]) answers with {[HeaderKind]: "keepalive"} (no body,
//     no sequence number), which restarts the reader's idle timeout. Both
//     are optional: a writer that never answers (an older one) is timed
//     by the reader's idle timeout, and a reader that never probes (an
//     older one) gets no keep-alive and ignores one.
//   - {[HeaderKind]: "cancel"} on the ack subject tells the writer that the
//     reader is gone (closed, or failed on a gap or timeout); the writer
//     stops. A writer that waits for credit longer than its idle timeout
//     also treats the reader as gone. A writer that sends nothing for its
//     idle timeout, and is not busy, ends the stream with an "error" frame
//     of code timeout.
//   - The reader checks that sequence numbers increase by exactly one: a
//     missing, repeated or out-of-order frame is [ErrGap], a frame whose
//     headers do not parse is [ErrInvalidFrame], and no frame nor
//     keep-alive for the idle timeout ([WithIdleTimeout]) is
//     [ErrIdleTimeout]. Loss is always an error, never silent.
//
// # Local writers
//
// When the reader's engine and the writer's both have local calls on
// (engine.WithLocalCalls, on in `iii up`) and are connected to the same
// server, [NewWriter] finds the reader open in this process and hands it
// its frames directly: no subscription, no ping, no frame, credit or
// cancel message on the bus, and no flush on Close. The frames are the
// same (sequence numbers, kinds, codec, trace context on frame 1, the
// error envelope), and so are credit, cancel and every error either side
// sees, except that a local writer is never probed for liveness (it lives
// in this process; its reader sees directly whether it is busy). `nats sub 'iii.ch.>'` does not see such a channel.
//
// A reader opened with [WithLocalFirst] does not subscribe at all until
// [Reader.Subscribe]; the call that starts the writer passes
// engine.BeforeBus(ctx, r.Subscribe), which subscribes (and flushes) only
// when that call goes over the bus, to a writer in another process:
//
//	r, _ := channel.Open(ctx, e, channel.WithLocalFirst())
//	defer r.Close()
//	go e.Trigger(engine.BeforeBus(ctx, r.Subscribe), "provider::scripted::stream", Req{Channel: r.ID()}, nil)
package channel
