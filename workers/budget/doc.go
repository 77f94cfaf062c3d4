// Package budget is the budget worker: the "budget" module, which caps
// LLM spend in USD per period for a workspace, an agent, or an agent in a
// workspace, and enforces the cap before every model call.
//
// The orchestrator calls budget::reserve with the estimated cost before a
// model call and budget::settle with the actual cost after it; a refused
// reservation (budget_exceeded) stops the turn with stop_reason
// budget_exceeded. Many orchestrator nodes share one ledger in JetStream
// KV, and every change is a compare-and-set on one key, so nodes can never
// overspend together: a reservation is granted only while spent + live
// holds + estimate stays within the ceiling.
//
// # Functions
//
//   - budget::create {ceiling_usd, period: "day"|"week"|"month",
//     workspace_id?, agent_id?, alert_thresholds?, budget_id?} → [Budget].
//     At least one of workspace_id and agent_id; ceiling in (0, 1e9];
//     thresholds in (0, 1] (sorted, duplicates dropped; absent or null
//     means [0.5, 0.8, 1], [] means no alerts); budget_id defaults to
//     "b_<nuid>", and an existing one is a conflict.
//   - budget::delete {budget_id} → {deleted}; false when it did not exist.
//   - budget::list {after?} → {budgets: [Budget], truncated?}, by id.
//   - budget::check {workspace_id?, agent_id?, budget_id?, estimated_usd?}
//     → {allowed, budgets: [Status]}; holds nothing.
//   - budget::reserve {workspace_id?, agent_id?, budget_id?, estimated_usd,
//     reservation_id, ttl_ms?} → {reservation_id, budgets: [Status]}, or
//     budget_exceeded naming the budget, its ceiling and what remains
//     (details: budget_id, ceiling_usd, remaining_usd, estimated_usd,
//     period_end). All or nothing across budgets. Idempotent by
//     reservation_id: a reserve of an id granted before holds nothing
//     more and answers existing:true with that reserve's estimated_usd
//     and the reservation's state (held, settling, settled). The hold lapses after ttl_ms (1 s to 24 h, default
//     15 min) if never settled. No matching budget: {reservation_id,
//     budgets: []} and nothing is written, so there is nothing to settle
//     (budget::settle would answer not_found).
//   - budget::settle {reservation_id, actual_usd} → {budgets: [Status]}:
//     actual_usd (0 just drops the hold) is spent in each budget of the
//     reservation, in the period it was made in, even if the hold expired.
//     Settling twice counts once (the first actual_usd stays). not_found
//     for a reservation never granted or gone (settled or expired more
//     than the retention, default 1 h, ago).
//   - budget::usage {workspace_id?, agent_id?, budget_id?, after?} →
//     {budgets: [Status], truncated?}, by id; no selector: every budget.
//
// list and usage answer within the server's max payload: past it they
// answer the first budgets that fit with truncated: true, and the next
// page is asked with after = the last budget_id answered.
//
// A [Status] is {budget_id, ceiling_usd, period, workspace_id?, agent_id?,
// period_start, period_end, spent_usd, reserved_usd, remaining_usd};
// times are Unix milliseconds, remaining = ceiling − spent − live holds,
// never negative. Amounts are kept to a billionth of a dollar.
//
// Selecting budgets: budget_id names one (not_found when missing);
// otherwise a call for workspace W and agent A is subject to every budget
// whose set fields all match ([Budget.Matches]): those of W alone, of A
// alone, and of W with A. check and reserve need a selector; usage without
// one lists everything.
//
// A budget admits an estimate when spent + live holds + estimate ≤ ceiling
// and spent + live holds < ceiling, so a zero estimate is refused once the
// budget is exhausted. Periods are UTC: a day starts at midnight, a week
// on Monday 00:00 (ISO), a month on the 1st; spend starts from zero in
// each.
//
// budget::create, ::delete, ::reserve and ::settle are for humans and the
// orchestrator, never a model (agent.HumanOnly).
//
// # Alerts
//
// When a settle brings spent/ceiling to a threshold, or a reserve is
// refused (the budget is at 100 %: threshold 1 if the budget has it), an
// [Alert] {type: "budget_alert", budget_id, threshold, spent_usd,
// ceiling_usd, period_start, period, workspace_id?, agent_id?} is published
// as JSON to subject subjects.BudgetAlertSubjectPrefix + budget id in the
// stream subjects.BudgetAlertStream ([AlertStreamConfig]: iii.budget.alert.>,
// kept 30 days) with Nats-Msg-Id "<budget>:<period_start>:<threshold>".
// The threshold is marked in the period state by the same compare-and-set
// that moves the spend, so each fires once per period; a publish that
// fails three times is logged, not retried later.
//
// # Ledger layout
//
// One KV bucket, subjects.BudgetsBucket ("iii-budgets", [BucketConfig]:
// History 1, file storage, per-key TTLs). Values are JSON.
//
// "def.<budget_id>": the [Budget] definition. Written once by create,
// purged by delete. Every node follows these keys with a watch, so
// matching a call to its budgets reads memory. A watch that ends, or a
// bucket deleted and created again (a restore), is opened again with
// backoff and the bucket's definitions replace the node's copy.
//
// "spend.<budget_id>.<YYYYMMDD>" (the period's start date): one key per
// budget and period, so a reserve is one compare-and-set per budget:
//
//	{"spent_usd": 1.25,
//	  "holds": {"r-42": {"usd": 0.3, "exp": 1767226500000}},
//	  "alerted": [0.5]}
//
// holds maps a reservation id to its estimate and expiry (Unix ms). Only
// live holds (exp in the future) count as reserved. An expired hold stays
// until its reservation record is gone (expiry + retention + 5 min of
// clock margin), then the next rewrite drops it: while a reservation can
// still be settled, "my hold is absent" means "already settled", which is
// what makes settle idempotent per budget without any other marker; a
// reserve that uses the id again once its record is gone replaces the
// lapsed hold and is admitted like any other. The
// value holds the live reservations and the few that lapsed unsettled.
// Old periods stay (history); delete purges them, after the definition.
// A delete that fails in between (a timeout, kill -9) leaves them behind,
// so a create under an id that is free purges any spend of that id first:
// a budget created again starts from zero. It purges each record at the
// revision it read, after checking the definition again, so a create of
// the same id racing it (defined and spending in between) keeps its
// spend: the loser answers conflict.
//
// "res.<reservation_id>": the reservation record, with a TTL:
//
//	{"reservation_id": "r-42", "state": "held", "estimated_usd": 0.3,
//	  "budgets": [{"budget_id": "b1", "period_start": 1767225600000}],
//	  "created_at": …, "updated_at": …, "expires_at": 1767226500000}
//
// Its life: reserve creates it "pending" (kv.Create; the reservation's
// lock: a second reserve of the id waits, answering conflict, and takes a
// pending record over once it is 30 s old, undoing its holds), places the
// holds in budget-id order, then makes it "held" (compare-and-set, TTL
// ttl + retention). A refusal undoes the holds placed and purges the
// record. Settle reads it, makes it "settling" with actual_usd
// (compare-and-set, the held record's remaining TTL), moves that amount
// into spent in each budget whose hold is still there, and makes it
// "settled" (compare-and-set, TTL retention): the settled marker that
// answers a repeated settle. A settle that dies between budgets is
// finished by the next settle of the id with the recorded actual_usd, so
// every budget counts the first figure once.
//
// # Lifecycle
//
//  1. New: the registry builds a [Worker]; embedders use [NewWorker].
//  2. Provision: settings "reservation_ttl" and "retention" (Go
//     durations); anything else is an error.
//  3. Start: [Open] the ledger (bucket, alert stream, definitions watch)
//     and register the seven functions.
//  4. Close: stop the endpoints, then the watch. The ledger stays.
//
// # Example
//
//	w := budget.NewWorker()
//	if err := w.Start(ctx, e); err != nil {
//		return err
//	}
//	defer w.Close(ctx)
//	_, err := engine.Call[budget.Budget](ctx, e, budget.CreateFunction,
//		budget.CreateRequest{WorkspaceID: "ws1", CeilingUSD: 5, Period: budget.PeriodDay})
//	res, err := engine.Call[budget.ReserveResponse](ctx, e, budget.ReserveFunction,
//		budget.ReserveRequest{WorkspaceID: "ws1", AgentID: "coder", EstimatedUSD: 0.3, ReservationID: callID})
//	if errors.Is(err, wire.ErrBudgetExceeded) {
//		// stop the turn: stop_reason budget_exceeded
//	}
//	// … the model call …
//	_, err = engine.Call[budget.SettleResponse](ctx, e, budget.SettleFunction,
//		budget.SettleRequest{ReservationID: callID, ActualUSD: cost})
package budget
