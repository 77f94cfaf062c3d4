// Package hook fans a hook out to whoever subscribes and collects their
// replies: the library behind hooks::publish_collect (SPEC §4), which the
// orchestrator also calls directly to save a hop.
//
// # Wire
//
// A hook topic is a function-id-like name ("agent::before_function_call");
// its subject is subjects.HookSubject of it ("iii.hook.agent.before_function_call").
// [PublishCollect] subscribes a fresh inbox, then publishes the payload as
// JSON (header Content-Type: application/json, plus Iii-Timeout-Ms, the
// time the subscribers have) with the inbox as reply subject. Any NATS
// client takes part by subscribing to the subject and replying with a JSON
// object (msgpack with Content-Type application/msgpack also works; an
// empty body is {}); no engine package is needed:
//
//	nats reply 'iii.hook.agent.before_function_call' '{"block":true,"reason":"read-only day"}'
//
// A reply that is not an object is kept as {"value": <it>}; one that does
// not decode is skipped and counted in [Result].Invalid. When nobody
// subscribes, the server answers no-responders and the call returns at once
// with no replies (a no-responders status after a reply is a subscriber's:
// it counts in [Result].Invalid). Otherwise it collects until ExpectedReplies replies came
// (when set), or no reply came for the quiescence (default
// [DefaultQuiescence]) after the last one, or the timeout (default
// [DefaultTimeout], at most [MaxTimeout]) passed; the replies are then
// folded by the request's [MergeRule] into [Result].Merged (see [Merge]).
// A round holds at most [MaxReplies] messages and [MaxReplyBytes] bytes,
// counted as each arrives (those queued and not yet read count too): one
// more ends it with [Result].Overflow set, so a subscriber that floods
// replies cannot keep it going or make it grow. A reply the client dropped
// while the round was open ([Result].Dropped) sets Overflow too: it may
// have been a block. A publish that fails sets
// [Result].PublishFailed and returns an error wrapping [ErrPublishFailed].
// A caller guarding a function call denies it on either: an overflowed
// round's unread replies may hold a block.
//
// # The harness's hooks
//
// These are conventions between the orchestrator, which publishes, and the
// subscribers:
//
//   - [TopicBeforeCall] before every function call, payload [BeforeCall]
//     {session_id, function_call_id, function_id, args}; reply [BeforeReply]
//     {block?, reason?, args?}: block denies the call with the reason; args
//     rewrites the arguments (and the policy checks the rewritten call
//     again). Merge rule [BeforeCallMergeRule] (first_block_wins): the
//     first blocking reply decides; otherwise the replies' fields merge, so
//     a rewrite comes through.
//   - [TopicAfterCall] after every function call, payload [AfterCall]
//     (the same fields plus result, an agent.FunctionResult); reply
//     [AfterReply] {result?}: result replaces the call's result, e.g.
//     redacted. Merge rule [AfterCallMergeRule] (field_merge).
//
// [Result.Bind] decodes the merged reply into [BeforeReply] or
// [AfterReply].
//
// # Lifecycle
//
// There is none: [PublishCollect] is a function, safe for concurrent use;
// each call owns its inbox subscription and removes it before returning.
//
// # Example
//
//	res, err := hook.PublishCollect(ctx, nc, hook.Request{
//		Topic:     hook.TopicBeforeCall,
//		Payload:   hook.BeforeCall{SessionID: sid, FunctionCallID: id, FunctionID: fn, Args: args},
//		MergeRule: hook.BeforeCallMergeRule,
//		TimeoutMs: 500,
//	}, hook.WithInjector(e.Inject))
//	if err != nil || res.Overflow {
//		return deny("hooks unavailable") // res.PublishFailed, ctx canceled, or too many replies
//	}
//	var before hook.BeforeReply
//	if err := res.Bind(&before); err != nil || before.Block {
//		return deny(before.Reason)
//	}
package hook
