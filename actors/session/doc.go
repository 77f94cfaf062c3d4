// Package session is the session grain: one proto.actor actor per session
// that drives the pure turn state machine (package actors/turn) and performs
// its actions and effects through narrow [Ports] — it never touches NATS
// itself. JetStream is the truth; the grain is a cache and a scheduler.
//
// # Lifecycle
//
//  1. A [Host] owns one actor system and activates a grain per session on
//     the first message for it ([Host.Wake], [Host.Abort]).
//  2. On activation the grain loads the record and its revision, and the
//     session's transcript, once. Calls left "started" by a dead activation
//     get [turn.Recover]. (A load that fails part way, say the parked
//     calls' approvals could not be recorded, is made again whole at the
//     next message; its wake is handed back to come again in 2 s.) A loaded outbox may have been delivered, whole or
//     in part, by the dead activation; the streams' duplicate windows drop
//     the copies only for a while, so the grain skips what is stored
//     already: the appends the transcript just read ends with, and the
//     events a [StoredEvents] port finds in the stream. When an append it
//     delivers again may still have been stored (after what the check
//     could see), the grain delivers the outbox without adding that
//     append's messages to the transcript it holds, and reads the
//     transcript again before the next model call. Otherwise the model
//     would see them twice.
//  3. The grain loops on [turn.Next]: provisioning and steering checks run
//     inline; a model stream and function calls run on goroutines that send
//     their outcome back as messages, so the mailbox stays free for aborts.
//     Every accepted input is one compare-and-set write of the record
//     ([Store.Write]), except a steering check: the grain reads the inbox
//     before it writes the input that enters the check (the function
//     results, the model's last answer) and folds the check's outcome
//     into that write, then removes the items it read (the record names
//     them, [turn.Record].Taken, until that removal is done: a removal
//     that failed or that a crash prevented is done before the next check
//     reads the inbox, so no item is taken in twice; a check that steering
//     wins leaves the follow-ups in their inbox); and the model's
//     answer asking for calls, which is held unwritten (nothing of it
//     delivered) while the calls are gated and written with the first
//     verdict, so a crash in between calls the model again. (A record loaded
//     in the check, after a crash, is checked on its own; an empty check
//     that continues to the model emits events only, which the write of
//     the model's answer carries, and a crash replays it with the same
//     event ids.) A write that loses the CAS means another activation
//     owns the session, and this one stops without acking anything. A
//     checkpoint the store refuses for good ([ErrUnstorable]) fails the
//     run instead ([turn.Fail] on the record before it), since trying it
//     again at every redelivery would never end the turn (unless it
//     carried effects not yet confirmed: it then waits for them and is
//     written alone). A
//     write that goes on to a model call starts that call before it
//     writes, so the two overlap; the call learns through
//     [ModelRequest.Committed] when the record is written and its outbox
//     delivered, and leaves no trace before that but the provider request
//     (a lost CAS cancels it). Appends of a dead activation's outbox that
//     the transcript does not end with go through [ReplayedHistory], which
//     looks them up however late the replay is.
//  4. Effects (events, transcript appends) are published asynchronously.
//     Before the next write replaces the outbox they came from, either
//     their acks are all in, or (a mid-run checkpoint, with a History port
//     that implements [SettledHistory]) the unconfirmed ones are carried
//     at the head of the new record's outbox, so the grain does not wait
//     for them. The terminal write, and the write where the grain parks,
//     wait for every ack ([History.Flush]).
//  5. When the run parks (approval) or ends, the grain writes the record
//     once more if its outbox was delivered since the last write, then acks
//     the step messages that woke it. Until then the wakes stay un-acked
//     with in-progress heartbeats, so a crash anywhere in between
//     redelivers them. A run that ended acks them once its outbox is
//     confirmed, and an unclustered host writes its record settled
//     200 ms later (settleDelay), unless the next run overwrote it first (the
//     copy [Host.Settled] hands run::start lists no outbox); the grain
//     writes it before it passivates or hands off. A settled write that
//     loses its compare-and-set to the next run lets this run go: the
//     grain takes that run up at its next message as an activation does
//     (step 2), whatever another activation did with it meanwhile.
//  6. After an idle period the grain passivates; the next wake activates it
//     again from KV.
//
// Abort works in every state: it cancels the model stream or the calls in
// flight and folds [turn.Abort] into the record.
package session
