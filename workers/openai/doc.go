// Package openai is the model provider for every server that speaks the
// OpenAI Chat Completions API: OpenAI itself, ollama, vLLM, LM Studio,
// kimi/moonshot, DeepSeek. The worker "provider-openai" serves
// provider::<name>::stream, provider::<name>::complete and
// provider::<name>::models (SPEC §4 providers), where <name> is the
// provider name setting ("openai" by default; "ollama" with
// --set provider-openai.name=ollama).
//
// # Requests
//
// A stream request (agent.ProviderRequest) becomes one streaming POST
// <base_url>/chat/completions (the SDK's Chat.Completions.NewStreaming):
// the system prompt is a system message; user text and images (data: URLs)
// are user messages; an assistant message is its text and its calls as
// tool_calls (thinking is not sent back); a function result is a tool
// message, and a call of the transcript without a result (its worker died)
// gets the tool message [InterruptedResult]. Tools are named with
// agent.NewToolNames ("math::add" → "math__add") and the model's calls are
// mapped back. max_tokens is sent as max_completion_tokens
// ([WithMaxTokensField] switches to max_tokens for old servers);
// stream_options.include_usage is always on; thinking_level low, medium or
// high is sent as reasoning_effort to the models that accept it
// ([WithReasoningEffort]). A session_id, when set, must be a valid
// session id (agent.ValidateSessionID); it only reaches the logs. A request
// that fails validation is an invalid_payload error and nothing is sent.
//
// # Streams
//
// The response is read with the SDK's SSE decoder; its chunks are decoded
// by the provider (the SDK's ChatCompletionChunk costs several times more
// per token and drops the reasoning fields of compatible servers), the
// plain deltas that make up a stream in a single pass, and delta frames
// are encoded by hand. A goroutine reads the stream while another writes
// the channel; plain deltas of one kind (text, reasoning, one call's
// arguments) that were already read when the previous frame went out are
// sent as one event ([WithCoalesce], 16 KiB by default), so a reader that
// keeps up sees the server's deltas one by one and a slow one fewer,
// larger frames, never later ones.
//
// Each chunk turns into model events, one per channel frame: start (held
// back until the first content), text_start/delta/end for delta.content
// (and delta.refusal), thinking_start/delta/end for the reasoning text of
// compatible servers (reasoning_content, reasoning), functioncall_start
// /delta for tool calls accumulated by index (parallel calls are several
// indexes; a fragment with a name and a new id under an index already
// used starts a new call, as ollama gives every parallel call index 0)
// and functioncall_end with the parsed arguments once the answer
// finishes; then usage (input = prompt_tokens − cached, output =
// completion_tokens, cache_read = cached; a count below zero counts as
// none), stop and done{message}. The
// finish_reason maps to the stop reason: stop → end, length → length,
// tool_calls → function_call, content_filter → end (logged). A call
// whose arguments are not a JSON object fails the answer as permanent once
// the stream has ended (the error event's message has the usage, which
// comes after the finish_reason), except when the answer was cut at
// max_tokens (length): that call is dropped.
//
// A failure ends the stream with an error event {kind, error, message =
// the partial answer}: 401/403 auth_expired (the cached credential is
// dropped; see Credentials for the one retry after a 401), 429 rate_limited (with retry_after_ms), a prompt too long
// context_overflow, other 4xx permanent, 5xx and network failures
// transient, as is a stream that ends without a finish_reason or whose
// server stays silent for the idle timeout ([WithIdleTimeout], 3 min by
// default: no response headers, or no byte of the stream while the
// provider waits for one; a keep-alive comment is a byte, time spent on a
// slow channel reader is not silence; the channel waits as long, since
// its writer is busy meanwhile: engine/channel, "Keep-alive"). An error
// response's body is read up to 64 KiB, however long the server makes it.
// One event of the stream may hold [MaxStreamEvent] (8 MiB) at most: a
// server that never ends an event fails the answer, permanent, rather than
// filling memory (the SDK's decoder gathers an event whole). A 200 answer that is
// not an event stream is permanent when it is HTML (a proxy's page) or
// JSON without an error, and classified as an error chunk when it is a
// JSON error. Rate limits and transient failures are retried
// ([WithMaxRetries], [WithBackoff], honouring Retry-After and
// retry-after-ms) only while nothing has been written to the channel; the
// SDK's own retries are off. A reader that leaves the channel stops the
// request.
//
// # Models
//
// provider::<name>::models is one GET <base_url>/models, retried as a
// stream is and failing with the same coded errors as complete. The idle
// timeout applies as to a stream: no response headers, or no byte of the
// body while the provider waits for one, fails the attempt as transient.
// The body is read up to [MaxModelsResponse] (8 MiB): a longer one fails
// the call as permanent (internal), naming the limit, and drops the
// connection.
//
// # Credentials
//
// Before each call the provider asks auth::get_token {provider: <name>}
// and keeps the answer for [DefaultCredentialTTL]; when there is no auth
// worker or no stored credential it reads the environment variable
// ([WithAPIKeyEnv], OPENAI_API_KEY by default). No credential at all is an
// auth_expired error event, unless [WithRequireKey](false) (local servers).
// A 401 to a cached credential (a key replaced with auth::set_token and
// revoked within the TTL) asks auth again, once: when the secret changed,
// the request is sent once more with the new one, before anything
// streamed and whatever max_retries says; when it did not, the call fails
// with auth_expired.
// The key never appears in an event, an error, a log line or a span: error
// texts from the server are scrubbed of it and of the configured header
// values.
//
// # Lifecycle
//
// The package registers the module "provider-openai" in init. A node runs
// New, Provision (settings name, base_url, api_key_env, require_key,
// max_retries, max_tokens_field, reasoning_effort, coalesce, idle_timeout
// and header.<Name>), Start (registers the three functions) and Close (ends
// the calls in flight with unavailable, then stops the endpoints).
// Embedders and tests build their own [Provider]:
//
//	p, err := openai.New(openai.WithName("ollama"),
//		openai.WithBaseURL("http://localhost:11434/v1"), openai.WithRequireKey(false))
//	w := openai.NewWorker(p)
//	if err := w.Start(ctx, e); err != nil { ... }
//	defer w.Close(ctx)
//	// provider::ollama::stream, ::complete and ::models are served.
package openai
