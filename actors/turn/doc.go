// Package turn is the per-session turn state machine of the harness, with
// no I/O: given a [Record] and an [Input] it returns the next record and the
// [Effect]s to perform. The session grain (package actors) performs actions
// and effects through narrow ports and stores the record in KV
// turn_state/<session_id>; this package never sees NATS, so every turn is
// testable and replayable from a log of inputs.
//
// # States
//
//	provisioning ──Provisioned──▶ assistant_streaming ◀─────────────────────┐
//	                                  │            │                          │ steering, follow-ups,
//	                   ModelDone with │            │ ModelDone without calls  │ or results to answer
//	                            calls ▼            ▼                          │
//	                     function_execute ──batch done──▶ steering_check ─────┘
//	                         │      ▲                            │
//	       only parked calls │      │ allow                      │ nothing queued
//	                  left   ▼      │                            ▼
//	                function_awaiting_approval                stopped
//
//	terminate result, max_turns after a batch ─▶ stopped
//	Abort, BudgetExceeded ─▶ stopped    ModelFailed, ProvisionFailed, Fail ─▶ failed
//
// [Next] says what the grain must do for a record ([ActionProvision],
// [ActionStreamModel], [ActionExecuteCalls], [ActionWait], [ActionPark],
// [ActionCheckSteering], [ActionDeliver], [ActionNone]); the grain does it
// and folds the outcome back in with [Apply]. Inputs that do not fit the
// record return [ErrUnexpectedInput] and change nothing, so a re-delivered
// input (a duplicate CallDone, a second approval) is harmless.
//
// # Rules
//
//   - turn_count counts model calls. When a batch of function results
//     completes with turn_count = max_turns, the run stops with stop_reason
//     "length" (the run hit its length limit) instead of calling the model
//     again. A model answer without calls at max_turns ends the run with
//     "end" and leaves the inboxes for the next run.
//   - At a steering check: steering messages win; else follow-ups (also the
//     ones held back from an earlier check that steering won); else, if the
//     last answer had function calls, the model is called again with their
//     results; else the run stops with "end". Messages that lose stay
//     queued and go back to the inbox when the run ends ([Finish].Requeue).
//     (The session grain gives a check that steering wins no follow-ups:
//     they stay in their inbox, so nothing is held or put back.)
//   - A function result with terminate: true stops the run with "end" once
//     the whole batch is done.
//   - Results keep the model's call order whatever order calls finish in.
//     Every prepared call ends with exactly one result and exactly one
//     function_execution_start / function_execution_end pair.
//   - [Abort] works in every non-terminal state and stops with "aborted":
//     calls not done get an aborted result, in-flight calls are listed for
//     cancellation and parked approvals for withdrawal.
//   - Provider errors ([ModelFailed], [ProvisionFailed]) end in failed:
//     message_complete with an assistant message of stop_reason "error"
//     (not appended to the transcript), then agent_end {stop_reason:
//     "error"}. Retries belong to the grain, before it reports the failure.
//   - [Fail] (the store refuses the run's next checkpoint for good: a
//     record too large for one message, a transcript entry over the
//     tree's limit) works in every non-terminal state and ends in failed
//     as provider errors do, with a record that keeps only what a finished
//     run needs: the answer, calls, results, input and undelivered outbox
//     are dropped; as in an abort, calls not done get an error result,
//     started calls are listed for cancellation and parked approvals for
//     withdrawal.
//   - A refused budget reservation ([BudgetExceeded]) stops with
//     "budget_exceeded".
//   - agent_end is always the last event of a run, followed by the
//     [EffectFinish] effect.
//
// # The grain's contract
//
// The record carries everything needed to resume after a crash between any
// two effects, if the grain keeps to this:
//
//  1. On activation, read the record and its KV revision. If [InFlight]
//     returns calls, they were started by a dead activation: apply
//     [Recover] (idempotent calls run again; the others get the result
//     "interrupted: outcome unknown").
//  2. Loop on [Next]. For [ActionDeliver], perform rec.Outbox in order and
//     continue with [Delivered](rec). Events are published with
//     Nats-Msg-Id = Effect.ID and transcript appends use Effect.ID as their
//     idempotency key, so delivering an outbox twice is harmless.
//  3. For any other action, do it and [Apply] its outcome, then write the
//     record with a compare-and-set on the revision before acting on the
//     next action. In particular [CallsStarted] is written before the calls
//     are dispatched, and the model's answer is written before any of its
//     calls run. A failed CAS means another activation owns the session:
//     stop. A failed write fails the step; nothing is skipped.
//  4. Every [Apply] appends its effects to the outbox, so several inputs
//     that need no action in between (calls finishing together) may be
//     applied in memory and written once. The effects of a write must be
//     delivered before the next write replaces the outbox — or, where some
//     are not confirmed yet, the next write keeps them at the head of its
//     outbox (the grain does this mid-run: package actors/session), so
//     they stay durable until confirmed.
//
// No Persist effect exists: the write after Apply is the grain's job, and
// the outbox makes the effects of that write durable with it.
//
// # Example
//
//	rec, _, err := turn.New(runStart, runID, nowMs)        // run::start writes rec
//	for {
//		act := turn.Next(rec)
//		switch act.Kind {
//		case turn.ActionDeliver:
//			deliver(rec.Outbox)
//			rec = turn.Delivered(rec)
//			continue
//		case turn.ActionNone, turn.ActionPark:
//			return // checkpointed; an approval or abort wakes the session
//		}
//		in := perform(act)                                  // provider, policy, calls...
//		next, _, err := turn.Apply(rec, in, nowMs)
//		if err != nil { ... }                               // record unchanged
//		if err := casWrite(next); err != nil { return err } // fenced by revision
//		rec = next
//	}
package turn
