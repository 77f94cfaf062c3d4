// Package approval is the approval gate: the "approval" module, where
// humans decide the function calls a turn parked (policy answered
// needs_approval) and set each session's approval mode.
//
// # Functions
//
//   - approval::resolve {session_id, function_call_id, decision:
//     "allow"|"deny"|"aborted", reason?, args_hash?} → {ok:true,
//     already_decided?, decision, decided_at}: the decision as recorded.
//     "aborted" asks the orchestrator to abort the whole run. A call is
//     decided once; the same request again — same call, decision and
//     reason, and args_hash, when given, the call's: a retry after a lost
//     reply — answers ok with already_decided:true and the first call's
//     decided_at, while the decided record is there and, once the
//     orchestrator consumed and deleted it, for the decision TTL (see
//     Decision receipts). Errors: invalid_payload
//     (bad ids — a call id with '/', '.', '*', '>' or whitespace —, an
//     unknown decision, a reason over 4 KiB or not UTF-8, an args_hash that
//     is not "sha256:" and 64 hex digits, a decided record that would not
//     fit the server's max payload — only another client's record comes
//     that close; a shorter reason may fit); not_pending (no such parked
//     call, decided with another decision or reason, a record that does
//     not decode, or args_hash given and different from the record's: the
//     call changed since it was shown); conflict (lost compare-and-sets;
//     retry: the decision may be taken already, and the retry completes
//     it); unavailable. Not declared idempotent in the catalog (that would
//     let mode "auto" pre-approve it), but safe to retry.
//   - approval::list_pending {session_id?} → {pending:[{session_id,
//     function_call_id, function_id, args, args_hash, requested_at}],
//     omitted?}, only pending records, oldest first (requested_at, then
//     key); never null. Without session_id it lists every copy of the
//     bucket (see Session homes). When the list would not fit the server's
//     max payload, the oldest that fit are listed and omitted counts the
//     others (decide those, or list one session, to see them); a call too
//     large to be listed even alone is passed over, counted in omitted and
//     logged at Warn with its ids (decide it by its id). A pending
//     record whose decision is taken (see Decision receipts) is not
//     listed: the list writes that decision into it.
//   - approval::settings::get {session_id} → {session_id, mode,
//     always_allow, updated_at?}; a session never set reads
//     {mode:"manual", always_allow:[]}.
//   - approval::settings::set {session_id, mode?, always_allow?} → the new
//     settings. Omitted (or null) fields keep their value; always_allow is
//     at most 256 patterns ('*' globs, anchored; a pattern of '*' alone,
//     "*" or "**", is refused: use mode "full"), duplicates dropped, order
//     kept. Settings too large for
//     the server's max payload are invalid_payload.
//
// approval::resolve and approval::settings::set are on agent.HumanOnly: the
// orchestrator's chokepoint denies them to a model whatever the policy
// says, so only humans (the CLI, a UI, `nats req`) call them. This worker
// does not check who calls; the chokepoint does.
//
// Every function takes a session id: an id, or "<region>.<name>" for a
// session homed in a region. A session homed in a region that has no
// copies of the buckets (no iii node ever ran there) is the engine's
// not_found error (wrapping engine.ErrUnknownRegion), and nothing is
// written.
//
// # Session homes
//
// The buckets are per-session buckets (engine.EnsureSessionKV): a primary
// copy, named as below, for the sessions without a region, and one copy per
// region, subjects.RegionalBucket(bucket, region) ("iii-approvals-at-eu",
// "iii-approval-settings-at-eu"), created by the nodes of that region in its
// cluster, for the sessions "<region>.<name>". Every read and write of a
// session goes to the copy of its home region (engine.SessionKV), whatever
// the region of the node serving the call. approval::list_pending without a
// session lists every copy there is (engine.SessionRegions). A key sits in
// exactly one copy: a key of a regional session in the primary copy (or of
// a plain or other region's session in a region's copy) is not listed —
// approval::resolve could not find it either.
//
// # KV layout (shared with the orchestrator)
//
// The approvals and settings buckets are created by whichever side comes
// first, with exactly [ApprovalsBucketConfig] and [SettingsBucketConfig]
// (a region's copy adds its placement): History 1, file storage, the
// engine's replicas. Values are JSON.
//
// subjects.ApprovalsBucket ("iii-approvals"), key
// subjects.ApprovalKey(session_id, function_call_id) =
// "<session_id>.<subjects.KVKey(function_call_id)>" (one token after the
// session: call ids hold no '/' or '.'; so "s1.toolu_01" for a plain
// session, "eu.s1.toolu_01" in "iii-approvals-at-eu" for session "eu.s1"),
// value an agent.ApprovalRecord:
//
//	{"session_id": "s1", "run_id": "r1", "function_call_id": "toolu_01",
//	  "function_id": "fs::write", "args": {"path": "/etc/x"},
//	  "args_hash": "sha256:<64 hex>", "requested_at": 1700000000000,
//	  "status": "pending"}
//
// Its life:
//
//  1. The orchestrator creates the record, status "pending", when a turn
//     parks a call (kv.Create).
//  2. approval::resolve rewrites it once, by kv.Update on the revision it
//     read, to status "decided" with "decision" ("allow", "deny",
//     "aborted"), "reason" (omitted when empty) and "decided_at" (Unix ms).
//     Every other field keeps its JSON value (compacted), including fields this
//     package does not know. Just before, it writes the decision's receipt
//     (see Decision receipts). A lost compare-and-set re-reads once; a
//     record found decided (or gone) answers the same decision and refuses
//     any other: a call is decided at most once.
//  3. The orchestrator watches the bucket, applies a decided record if its
//     call is still parked with the same args_hash and run_id, then deletes
//     the key; it deletes the pending keys of a run that ends. This worker
//     never deletes.
//
// subjects.ApprovalSettingsBucket ("iii-approval-settings"), key the
// session id ("s1", or "eu.s1" in "iii-approval-settings-at-eu"), value an
// agent.ApprovalSettings:
//
//	{"session_id": "s1", "mode": "auto", "always_allow": ["fs::read", "git::*"],
//	  "updated_at": 1700000000000}
//
// Only approval::settings::set writes it (create when absent, else update
// on the revision read, retried up to 8 times); the orchestrator reads it.
// Readers treat an absent key as [DefaultSettings] and an absent mode as
// "manual". This worker leaves out a stored pattern that no longer
// validates ("**", stored before all-'*' patterns were refused) when it
// reads the settings (logged once per stored value), so
// approval::settings::get answers and approval::settings::set keeps the
// other patterns, writing the list back without it.
//
// # Decision receipts
//
// [DecisionsBucket] ("iii-approval-decisions", a per-session bucket like
// the others: "iii-approval-decisions-at-eu" for the sessions of region
// eu; History 1, max age the decision TTL), written and read by this
// worker only, key the call's approval key, value a receipt:
//
//	{"session_id": "s1", "function_call_id": "toolu_01", "run_id": "r1",
//	  "function_id": "fs::write", "args_hash": "sha256:<64 hex>",
//	  "requested_at": 1700000000000, "decision": "allow", "reason": "ok",
//	  "decided_at": 1700000005000}
//
// A decision is taken when its receipt is written: created (first writer
// wins) after the pending record is read and checked, and before that
// record is decided. The receipt names the pending record it decides (run,
// function, args hash, requested_at). A resolve that finds a receipt bound
// to the pending record — its writer was killed between the two writes,
// or is writing right now — writes the receipt's decision into the record
// (answering ok to the same request, not_pending to any other), so no
// state has the call decided one way and reported the other. When nobody
// resolves the call again, the worker does: approval::list_pending writes
// the decision of each listed record that has one, and each replica's
// sweep follows the receipts and, [WithSettleDelay] (10 s) after it sees
// one (at start, every one), writes its decision into its record if that
// is still pending and bound to it. These writes are compare-and-sets on
// the pending record, so replicas write a decision once, and need a live
// receipt bound to the record, so they never decide a call nobody
// decided; the orchestrator sees the record decided as if the resolver
// had written it. A sweep follows the decisions copies its node opened
// (the primary, its region's); a check that cannot reach the buckets is
// tried 8 times, with backoff, then logged at Error (the next list or
// resolve of the call settles it). A receipt of
// another record (a call of another run with the same id, or one older
// than the TTL, or a value that does not decode) decides nothing and is
// replaced. Once the orchestrator deleted the record, a live receipt only
// answers: approval::resolve never writes an approval record from it, and
// the orchestrator never reads this bucket, so a receipt cannot make a
// call run. (A caller with write access to the buckets could write a
// decided approval record directly anyway.) A resolver stopped after its
// receipt when the run ended before the record was decided leaves a
// receipt that answers ok to its retry: the decision was taken; the run
// that would have applied it was over.
//
// The decision TTL is [DefaultDecisionTTL] (24h), set with
// [WithDecisionTTL] or the module setting "decision_ttl" (a Go duration,
// 1m to 720h). It is the bucket's max age when this worker creates it (an
// existing bucket keeps its own; a shorter one is logged at Warn), and a
// receipt older than it is ignored in any case. A session whose region has
// an approvals copy but no decisions copy (its nodes predate it) is
// decided without a receipt.
//
// # Lifecycle
//
//  1. New: the registry builds a [Worker]; embedders use [NewWorker].
//  2. Provision: the one setting is [SettingDecisionTTL]; any other, or a
//     value out of range, is an error.
//  3. Start: open (create) the three buckets — the primary copies and, on
//     a node with a region (engine.WithRegion), that region's —, start
//     the sweep of the decision receipts, and register the four
//     functions.
//  4. Close: stop the sweep and the endpoints. The buckets and their
//     records stay.
//
// # Example
//
//	w := approval.NewWorker()
//	if err := w.Start(ctx, e); err != nil {
//		return err
//	}
//	defer w.Close(ctx)
//	resp, err := engine.Call[approval.ResolveResponse](ctx, e, approval.ResolveFunction,
//		approval.ResolveRequest{SessionID: "s1", FunctionCallID: "toolu_01", Decision: agent.DecisionAllow})
//	if errors.Is(err, wire.ErrNotPending) {
//		// decided otherwise, not waiting, or the call changed since it was shown
//	}
//	_ = resp.AlreadyDecided // true when a retry found this decision recorded
package approval
