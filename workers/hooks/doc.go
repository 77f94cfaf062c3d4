// Package hooks is the "hooks" worker module: it serves
// hooks::publish_collect (SPEC §4), the bus face of package engine/hook.
//
//	hooks::publish_collect {topic, payload, merge_rule, timeout_ms?, expected_replies?, quiescence_ms?}
//	  → {replies[], merged, publish_failed?, invalid?, dropped?, omitted?, overflow?}
//
// A call publishes payload as JSON on iii.hook.<topic tokens> (a JSON
// caller's payload as the JSON it sent, so an integer past 2^53 arrives
// unchanged rather than rounded through a float64) and collects
// the replies of whoever subscribes, until expected_replies came, or the
// quiescence passed after the last reply, or the timeout; with no
// subscriber it answers at once. See package engine/hook for the merge
// rules and the harness's two hooks (agent::before_function_call,
// agent::after_function_call) and their payloads.
//
// A request that does not validate (bad topic, unknown or missing
// merge_rule, timeout_ms outside 0..60000, expected_replies outside
// 0..1000, quiescence_ms over the timeout) is answered with the coded error
// invalid_payload. A publish that fails is not an error: the answer has
// publish_failed true, and a caller guarding a function call denies it.
// A round that passes its bound (1,000 messages or 8 MiB, counted as they
// arrive, engine/hook) or loses a reply to a slow consumer (dropped) ends
// with overflow true; a caller guarding a call denies it too, since an
// unread reply may have blocked.
// An answer that would not fit the server's max payload leaves the newest
// replies out of replies and counts them in omitted; merged still folds
// every reply (a merged reply too large on its own is internal). The hook
// message carries the call's trace context, so subscribers' spans join the
// caller's trace. The collect ends a little before the caller's
// own deadline (Iii-Timeout-Ms), so the answer arrives while the caller
// still waits.
//
// # Lifecycle
//
// The module registers itself in init; a node starts it by name ("hooks").
// [Worker.Start] registers the function on the engine worker "hooks";
// [Worker.Close] stops it. There are no settings and no state.
//
//	w := hooks.NewWorker()
//	if err := w.Start(ctx, e); err != nil { ... }
//	defer w.Close(ctx)
//	res, err := engine.Call[hook.Result](ctx, e, hooks.PublishCollectFunction, hook.Request{
//		Topic: "agent::after_function_call", Payload: payload, MergeRule: hook.FieldMerge,
//	})
//
// From a shell:
//
//	nats req iii.fn.hooks.publish_collect '{"topic":"audit::ping","payload":{},"merge_rule":"field_merge"}'
package hooks
