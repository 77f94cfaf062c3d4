// Package anthropic is the model provider for Anthropic's Messages API: the
// worker "provider-anthropic" serves provider::anthropic::stream,
// provider::anthropic::complete and provider::anthropic::models (SPEC §4
// providers) with the official Go SDK (anthropic-sdk-go/v2).
//
// # Requests
//
// A request is an agent.ProviderRequest ([StreamRequest],
// [CompleteRequest]). The system prompt becomes a system block with a
// cache breakpoint, the tools become tool definitions named by
// agent.NewToolNames ("math::add" → "math__add"; the last one carries the
// second cache breakpoint), and the transcript becomes alternating user
// and assistant turns:
//
//   - user text and images (base64 sources; jpeg, png, gif, webp);
//   - assistant text, function calls (tool_use with the call's arguments)
//     and thinking, in their order. A thinking block goes back as the API
//     sent it: with its Signature as a thinking block {thinking,
//     signature}, or, when it has Data (a redacted one, see Streams), as a
//     redacted_thinking block {data}. Thinking without either is dropped
//     (the API refuses unsigned thinking), and so is the thinking of an
//     assistant message whose Provider is neither "anthropic" nor empty,
//     and thinking after a message's last other block (a stream cut while
//     thinking: the API wants no message to end with thinking);
//   - function results become tool_result blocks at the head of the next
//     user turn, in the order of the calls; a call the transcript has no
//     result for (a crash cut the turn) gets an [InterruptedResult] error
//     result, and a result whose call is not in the turn before is written
//     out as text. Without tools, calls and results are written out as
//     text (the API refuses tool blocks in a request without tools).
//
// A session_id, when set, must be a valid session id
// (agent.ValidateSessionID); it only reaches the logs. A request that
// fails validation is an invalid_payload error and nothing is sent.
//
// max_tokens defaults to the model family's largest output (8192 when the
// model is unknown); thinking_level low, medium and high enable thinking
// with a budget of 1024, 4096 and 16384 tokens (max_tokens is raised above
// the budget). A request that continues a tool loop (its last assistant
// turn has calls) keeps its thinking level only when that turn starts with
// a signed or redacted thinking block, as the API wants of a loop that
// runs with thinking; otherwise (the loop ran without thinking, its
// thinking was not signed, or a text comes first) it runs without
// thinking, as the loop did.
//
// # Streams
//
// The SSE events become agent.ModelEvents, one channel frame each:
// message_start → start (and usage with the input and cache counts);
// content_block_start/delta/stop of text, thinking and tool_use →
// text_*, thinking_*, functioncall_* (a call's deltas are its JSON input,
// its end carries the parsed arguments; a call whose input is not a JSON
// object fails the answer as permanent once message_delta gave the usage,
// except the answer's last call cut short by max_tokens, which gets no
// functioncall_end and is left out of the message, stopped with length);
// message_delta → usage (running totals) and stop; message_stop → done
// {message} (a stream that ends after message_delta gave the stop reason
// but before message_stop is done all the same: the answer is whole; a
// block still open when the stop reason or message_stop comes ends there,
// as its content_block_stop would end it). A token count below zero counts
// as none. A thinking block's
// signature_deltas make no event: the signature is the finished block's
// Signature, in thinking_end's content and in the final message, so the
// transcript can send the block back. A redacted_thinking block (thinking
// the API encrypted) becomes thinking_start and thinking_end of a thinking
// block with no text whose Data is the API's encrypted data, which goes
// back as it came. An unfinished block of an error event's partial message
// has no signature. Pings, citations and block kinds the harness cannot
// carry (server tools and their results) are skipped. Stop reasons:
// end_turn, stop_sequence, refusal → end; max_tokens → length; tool_use →
// function_call.
//
// A goroutine reads the stream while another writes the channel; deltas of
// one block that were already read when the previous frame went out are
// sent as one event ([WithCoalesce], 16 KiB by default), so a reader that
// keeps up sees the API's deltas one by one and a slow one fewer, larger
// frames, never later ones. The SDK sends the request and frames the SSE
// events; the events themselves are decoded by a small decoder of this
// package (the SDK's reflective union decoding costs ~10 µs per token),
// and delta frames are encoded by hand.
//
// A failure before the first event (429, 5xx, 529, a refused or dropped
// connection) is retried with exponential backoff from 500 ms, honouring
// Retry-After and retry-after-ms, up to max_retries times. Any other
// failure, and any failure once events went out, ends the stream with an
// error event {kind, error, message: the partial answer}: 401 and 403 are
// auth_expired, 429 rate_limited (with retry_after_ms), a 400 that says
// the prompt is too long context_overflow, other 4xx permanent, 5xx, 529
// and network failures transient, as is a stream whose API stays silent
// for the idle timeout ([WithIdleTimeout], 3 min by default: no response
// headers, or no byte of the stream while the provider waits for one; an
// SSE comment or a ping is a byte, and time spent on a slow channel reader
// is not silence; the channel waits as long, since its writer is busy
// meanwhile: engine/channel, "Keep-alive"); an error event mid-stream is
// classified by its type (overloaded_error → transient, rate_limit_error
// → rate_limited...). A
// 200 answer that is not an event stream is not taken for a dropped
// connection: HTML (a proxy's page) is permanent, a JSON API error is
// classified by its type, other JSON is permanent. An error
// response's body is read up to 64 KiB, however long a gateway makes it
// (a cut body is classified by its status). One event of the stream may
// hold [MaxStreamEvent] (8 MiB) at most: a server that never ends an event
// fails the answer as a malformed stream (permanent) rather than filling
// memory (the SDK's decoder gathers an event whole).
//
// # Models
//
// provider::anthropic::models lists GET /v1/models page by page, retried
// as a call before its first event is, and fails with the same coded
// errors as complete. It lists [MaxModels] (4096, the most
// models::reconcile takes) at most: a longer listing fails as permanent
// (internal), naming the bound, with no page fetched past it, rather than
// being cut (reconcile would mark the models past the cut missing). The idle timeout applies to each
// page as to a stream: no response headers, or no byte of the body while
// the provider waits for one, fails the attempt as transient. A page's
// body is read up to [MaxModelsResponse] (8 MiB): a longer one fails the
// call as permanent (internal), naming the limit, and drops the
// connection.
//
// # Credentials
//
// Before each call the provider asks auth::get_token {provider:
// "anthropic"} and caches the answer for 30 s ([WithCredentialTTL]); an
// auth_expired failure drops it. A 401 to a cached credential (a key
// replaced with auth::set_token and revoked within the TTL) asks auth
// again, once: when the secret changed, the request is sent once more with
// the new one, before anything streamed and whatever max_retries says;
// when it did not, the call fails with auth_expired. When the auth worker
// is not running (function_not_found) or has no credential,
// ANTHROPIC_API_KEY is used; with neither, the stream ends with
// auth_expired. An API key goes out as x-api-key, an OAuth token
// as Authorization: Bearer with the oauth beta flag. The secret never
// appears in an event, a reply, a log line or a span.
//
// # Lifecycle
//
// The package registers the module "provider-anthropic" in init. A node
// runs New, Provision (settings base_url, max_retries, backoff,
// max_retry_wait, credential_ttl, idle_timeout, api_key_env, coalesce), Start
// (registers the three functions) and Close (ends the calls in flight with
// unavailable, then stops the endpoints). Embedders and tests use
// [NewWorker] with their own [Provider]:
//
//	p, err := anthropic.New(anthropic.WithBaseURL("https://proxy.example/anthropic"))
//	if err != nil { ... }
//	w := anthropic.NewWorker(p)
//	if err := w.Start(ctx, e); err != nil { ... }
//	defer w.Close(ctx)
//
// and the orchestrator reads an answer as from any provider:
//
//	r, _ := channel.Open(ctx, e)
//	go e.Trigger(ctx, anthropic.StreamFunction, anthropic.StreamRequest{Channel: r.ID(), Model: "claude-sonnet-4-5", Messages: msgs}, nil)
//	for { f, err := r.Next(ctx); ... }
package anthropic
