// Package compaction is the compaction worker: the "compaction" module,
// which keeps a session's history inside its model's context window by
// replacing the oldest part of the active path with a summary written by
// the session's own model.
//
// # Function
//
// compaction::compact {session_id, provider, model, reason?, wait?,
// keep_tokens?} → [CompactResponse] {compacted, entry_id?,
// first_kept_entry_id?, tokens_before, tokens_after, reason?,
// summary_calls?}. Step by step:
//
//  1. The model's window comes from models::get (an unknown model is
//     invalid_payload). The usable window is context_window − reserve,
//     the reserve being min(reserve_tokens, context_window/4).
//  2. One compaction per session at a time: a lease, the key <session_id>
//     of the KV bucket [LeaseBucket], created with a per-key TTL
//     ([WithLeaseTTL], two minutes) and renewed by its holder every third
//     of it; a crashed holder's lease expires. The bucket is one for every
//     region (a lease is transient coordination, not session state): a
//     session homed in a region ("eu.s1") has the key "eu.s1", a valid KV
//     key whose subject "$KV.iii-compaction-leases.eu.s1" the bucket
//     captures and which no other session's key matches (the plain
//     session "eu" is the key "eu"). A second caller answers
//     {compacted: false, reason: "in_progress"} at once, or with wait
//     watches the key until the lease is gone, takes it and reads the
//     session: it answers "done_by_other" (the caller then re-reads the
//     session) when the path's last compaction is no older than the
//     other one's start (the lease's started_at_ms), and compacts itself
//     when the other one wrote nothing (its model failed, its holder
//     crashed and the lease expired). A "wrong last sequence" of a
//     replicated bucket, as Create answers over a released lease, is
//     the key taken.
//  3. The active path is read with session::messages (and
//     session::entries for the previous summary's text, when there is
//     one), every page of an answer the tree cut to fit the max payload
//     (truncated, then after the last item on the same leaf); whether the
//     first message is the previous summary is read from its path step,
//     or from its entry when the answer left the step out (a cut answer
//     has none); a previous summary not on the path is internal. The session tree finds the session's own copy of its stores,
//     so the worker reads no stream itself. A session of a region with no
//     stores is the session tree's not_found. Tokens are estimated with [EstimateTokens].
//  4. The cut: the newest messages up to keep_tokens (default a quarter
//     of the usable window) stay verbatim. The kept part starts at a user
//     message, never between a function call and its result, and always
//     holds the newest user message — unless that turn alone is more than
//     twice keep_tokens (a long agent loop on one prompt): then, with
//     [WithSplitTurns] (the default), the kept part starts at an
//     assistant message of that turn and the summary ends with the
//     newest user message verbatim ([LatestRequestHeading]), up to
//     twice keep_tokens (estimated tokens, 4 bytes each: the turn size
//     the cut keeps whole); a longer message loses its middle. Nothing
//     older than the cut (besides the previous summary) answers
//     "nothing_to_compact".
//  5. The older part is rendered as text (function outputs larger than
//     [WithPruneBytes] become "[output of <function_id> pruned: N
//     bytes]") and summarized by provider::<provider>::complete with
//     [SystemPrompt]: sections Goal, Constraints, Progress, Decisions,
//     Function calls made, Next steps, Critical context, Files; a previous
//     summary is updated, not replaced. No request is estimated above the
//     usable window: a transcript too big for one request is summarized
//     in chunks, each folded into the running summary.
//  6. The entry {type: "compaction", summary, first_kept_entry_id,
//     tokens_before} is appended with session::append at the active leaf,
//     so messages appended meanwhile stay on the path;
//     session::messages then answers [summary, ...kept messages]. The
//     entry fits the session tree's entry limit ([WithMaxEntrySize],
//     256 KiB, and at most the server's max payload less 1 KiB) with
//     1 KiB left for its other fields: the quote loses its middle first
//     (down to 256 bytes), then the summary.
//
// Errors are coded: invalid_payload for bad input or an unknown model;
// the session tree's not_found for an unknown session; the provider's
// error when a summary cannot be written; internal when the model
// answers no text ([ErrEmptySummary]) or an answer that did not end
// normally, such as one cut by its output bound ([ErrTruncatedSummary]),
// or when the entry limit cannot hold even a minimal entry
// ([ErrEntryTooSmall]);
// conflict when the compaction lost its lease ([ErrLeaseLost]) or the
// active leaf moved meanwhile to a branch without the first kept entry
// ([ErrPathChanged]; a leaf that moved on past it is fine, the entry goes
// on top of it). When the session tree refuses the append
// (invalid_payload), the worker reads the active leaf with session::get
// and asks session::entries for the path to it after the first kept
// entry, which the tree refuses when that entry is not on the path: one
// path read, for a path of any size. Nothing is appended on an error before
// the append; one after it was sent (the lease lost, a timeout) may find
// it stored. The append carries a dedup id of the compaction (session,
// leaf read, first kept entry), so a retry of the same compaction within
// the session tree's ten-minute window is answered that entry instead of
// storing a second summary.
//
// # Threshold trigger
//
// A durable consumer [ConsumerName] on every copy of the events stream
// reads every event, decoding only its type first. The copies are the
// primary III_EVENTS (subjects iii.events.<session_id>, session ids
// without a region) and one per region, III_EVENTS_AT_<region> (subjects
// iii.events.<region>.<name>, the sessions "<region>.<name>" homed
// there); the consumer has the same name on each (consumer names are per
// stream) and no subject filter (a copy holds only its sessions' events).
// The session id is the whole rest of the subject after "iii.events.".
// The trigger lists the copies (engine.SessionRegions) at start and every
// 30 seconds, binds a consumer on each new one, and lets a region's copy
// go when it is deleted (the next listing binds it again if it comes
// back). A turn_end whose assistant message's usage ([UsedTokens]: input,
// cache and output tokens) reaches the usable window of the message's
// provider and model starts a compaction with reason "threshold" in the
// background, at most [WithConcurrency] at a time over all copies (an
// event that finds no free slot is redelivered a second later, then after
// waits doubling up to a minute, some 15 minutes in all; at its last
// delivery it is skipped with a warning). When
// another compaction of the session runs, the trigger waits for it and
// checks again: a turn_end older than the path's last compaction is
// skipped. Failures are logged and acked: the orchestrator, which
// compacts with reason "overflow" before a model request that would not
// fit, is the backstop. The setting auto=false turns the trigger off. The
// primary consumer binds as soon as the stream exists (the orchestrator
// creates it), new events only, and every consumer binds again if it is
// deleted. Close stops every copy's consumer.
//
// # Lifecycle
//
//  1. New: the registry builds a [Worker]; embedders use [NewWorker].
//  2. Provision: the settings reserve_tokens, keep_fraction, prune_bytes,
//     lease_ttl, auto, concurrency, timeout, split_turns and
//     max_entry_size (see the Setting* constants); any other is an error.
//     Without max_entry_size of its own the worker takes the session
//     tree's (session.max_entry_size) when set and within its range.
//  3. Start: open (create) [LeaseBucket], register compaction::compact
//     on the engine worker "compaction" with its schemas and skill, start
//     the trigger.
//  4. Close: stop the trigger (the listing and every copy's consumer),
//     end the compactions in flight (their leases are released), stop
//     the endpoint.
//
// # Example
//
//	w := compaction.NewWorker()
//	if err := w.Start(ctx, e); err != nil {
//		return err
//	}
//	defer w.Close(ctx)
//	r, err := engine.Call[compaction.CompactResponse](ctx, e, compaction.CompactFunction,
//		compaction.CompactRequest{SessionID: sid, Provider: "anthropic", Model: "claude-sonnet-4-5",
//			Reason: compaction.ReasonOverflow, Wait: true})
//	if err == nil && (r.Compacted || r.Reason == compaction.OutcomeDoneByOther) {
//		// re-read session::messages
//	}
package compaction
