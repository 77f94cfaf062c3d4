// Package queue is the consumer side of iii's durable queues (SPEC §3):
// it runs the function calls that [engine.Engine.Enqueue] puts on stream
// III_QUEUE, retries them with exponential backoff, dead-letters the ones
// that keep failing onto "iii.dlq.<queue>" (stream III_DLQ), and lets an
// operator inspect and redrive them.
//
// # Lifecycle
//
// A producer enqueues anywhere:
//
//	err := e.Enqueue(ctx, "emails", "mail::send", req, engine.WithDedupID(orderID))
//
// Any number of processes consume the queue; they bind one durable
// consumer (subjects.QueueConsumer) and share its messages:
//
//	c, err := queue.Consume(ctx, e, "emails", queue.WithMaxDeliver(5))
//	defer c.Close(ctx) // drain: finish what is in flight
//
// For each message the consumer calls the function named by its
// Iii-Function-Id header through [engine.Engine.TriggerRaw], with the
// message's codec and trace context, and then
//
//   - acks on success (the work-queue stream forgets the message);
//   - on a retryable error naks with a delay of base·2^(n-1) after delivery
//     n, capped, with jitter ([WithBackoff], [WithJitter]);
//   - on a final error ([Retryable]: invalid_payload, forbidden, or a
//     message with no valid function id) or when the deliveries reach
//     max deliver ([WithMaxDeliver], default 5), publishes a dead letter —
//     the original body and headers plus Iii-Queue, Iii-Error-Code,
//     Iii-Error-Message, Iii-Deliveries, Iii-Enqueued-At,
//     Iii-Dead-Lettered-At, Iii-Queue-Seq; the error message is cut to
//     what fits the max payload — and removes the original only
//     after JetStream acked the dead letter. A crash in between leaves both;
//     the original comes back and is not dead-lettered twice: within the
//     DLQ stream's duplicate window (the server default, 2 minutes)
//     JetStream drops the copy (Nats-Msg-Id "iii-dlq-<queue>-<seq>"), and
//     a redelivery (delivery 2 or later) first looks for a dead letter
//     with its Iii-Queue-Seq among those stored since it was enqueued,
//     then only removes the original. A redelivered message whose call
//     fails with a final error still runs its function once more: queues
//     deliver at least once.
//
// A dead letter that does not fit the server's max payload even without
// its error message (a message a client published onto iii.queue.<name>
// close to the limit, without the room Enqueue keeps, or one stored
// before the max payload was lowered) is stored without its body: the
// body goes first to the object store [DLQBodiesBucket] (created on first
// use, objects expire with the dead letters), as object
// "<queue>/<queue seq>", and the dead letter says where (Iii-Body-Object)
// and how large it was (Iii-Body-Size). A work-queue stream cannot keep
// an ended message (a term removes it as an ack does), and publishing a
// dead letter that cannot fit would fail and be retried for ever. Only a
// message whose headers alone leave no room for a dead letter's stays on
// its queue, retried with backoff and logged.
//
// When the dead-letter publish fails (III_DLQ unavailable) the message
// is nak'ed with backoff and stays on its queue. JetStream cannot change
// its headers on nak, so the Consumer keeps its error in memory, by
// stream sequence (at most 4,096, oldest evicted first): the redelivery,
// when it comes back to the same Consumer, is dead-lettered with that
// error, whatever its delivery count, without calling the function again.
//
// Deliveries are counted by this package (the JetStream consumer has no
// MaxDeliver), so a message whose last delivery never answered — its
// consumer crashed — is dead-lettered with code timeout on the next
// delivery instead of being parked in the stream forever. Its message
// says the previous delivery's outcome was not recorded, since that is
// all this process knows: the delivery may also have ended in another
// process that could not store its dead letter.
//
// While a call runs the consumer sends in-progress heartbeats every
// AckWait/3, so a long call keeps its message and the AckWait
// ([WithAckWait]) only decides how soon a crashed consumer's messages are
// redelivered. [Consumer.Stop] behaves like a crash (nothing is acked or
// nak'ed); [Consumer.Drain] and [Consumer.Close] finish the calls in
// flight first. Delivery is at least once: a call that succeeded but whose
// ack was lost runs again, so queued functions should be idempotent.
//
// A Consumer whose JetStream consumer vanishes under it — deleted, or
// deleted with its stream — notices (the consume's end or error, or a look
// at the consumer every 30 s: with no pull request waiting at the server,
// nobody is told) and logs a warning naming it. A queue's Consumer then
// ensures III_QUEUE, III_DLQ and its consumer again, with backoff from
// 0.5 s to 30 s, and runs on; messages still in the stream are delivered
// again. An attached Consumer re-creates its consumer (from the new
// stream's first message) once its stream exists again, but ends when
// its consumer alone was deleted, as unsubscribing a durable topic from
// another process does. [Consumer.Closed] reports that end.
//
// # Dead letters
//
// [DeadLetters] lists them, [Redrive] moves them back (publish, then
// delete, idempotent under Nats-Msg-Id "iii-redrive-<queue>-<seq>" within
// the III_QUEUE stream's duplicate window, 2 minutes; a redrive that died
// between its publish and its delete and is retried later than that
// enqueues the message twice — see [Redrive]; a dead letter that would
// not fit the queue with the room Enqueue keeps for a call's and a dead
// letter's headers, or whose body is in [DLQBodiesBucket], is skipped,
// counted and logged, never blocking the others; a redrive that fails
// partway returns, and queue::redrive answers in its error's details, what
// it moved before),
// and [Inspect] reports a queue's counts. [Serve] exposes all of this as the
// functions queue::enqueue, queue::dead_letters, queue::redrive and
// queue::stats of worker "queue", so the nats CLI can drive it:
//
//	nats req iii.fn.queue.redrive '{"queue":"emails"}'
//
// [Attach] runs the same retry loop on any explicit-ack JetStream consumer
// (durable topics use it); such a consumer has no dead-letter subject and
// terminates a message that used up its deliveries.
package queue
