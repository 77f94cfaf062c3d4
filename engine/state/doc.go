// Package state is iii's state primitive for Go workers: JSON values under
// (scope, key) in the JetStream KV bucket "iii-state", compare-and-set
// updates, the state::* functions, and durable state triggers.
//
// # Storage
//
// One bucket holds every scope. The value of key "a/b" in scope "orders"
// lives under the KV key "orders.a.b" (subjects.StateKVKey: a scope is one
// token of [A-Za-z0-9_-]; key segments are escaped, so any printable key
// with non-empty '/'-separated segments maps injectively). Values are
// stored as compact JSON, so `nats kv get iii-state orders.a.b` shows them
// and any language can read them. The Go API takes any value with a JSON
// encoding and returns decoded JSON: map[string]any, []any, int64,
// uint64, float64, string, bool or nil. Numbers are exact: a number
// written without fraction or exponent is an integer, an int64 (a uint64
// above int64's range), so ids, counters and nanosecond timestamps past
// 2^53 keep every digit in the stored JSON and in every answer; any other
// number (1.5, 1e3, or an integer beyond 2^64-1) is a float64. Values
// stored before this rule read the same way. Bytes written by a foreign
// client that are not JSON read as a string. The bucket keeps
// [DefaultHistory] revisions per key.
//
// A value's JSON may be at most half the server's max payload minus 4 KiB
// (about 510 KiB by default; [Store.MaxValueSize]), so that a reply or a
// trigger event carrying the old and the new value fits in one message.
// Larger values are refused with invalid_payload and nothing is written,
// as are values whose msgpack encoding (the codec of Go callers' replies)
// exceeds that size by more than 8 bytes of headers: a float takes 9
// bytes in msgpack and as few as 4 in a JSON array, so an array of many
// short floats meets this limit at under half the JSON one. So are values
// whose arrays and objects nest more than 9997 deep (so that every answer
// decodes with encoding/json's limit of 10000 levels).
//
// # Writes
//
// [Store.Set], [Store.Update] and [Store.Delete] read the key's latest
// revision and write with "expected last subject sequence" set to it; when
// another writer got there first they read again and retry (jittered
// backoff, [WithMaxRetries] attempts, then conflict). So the old value they
// return is exactly the value replaced, and an Update is atomic. Every
// write carries the header [HeaderPrevRevision] and the caller's trace
// context. [Store.Get] of a missing key is a wire.ErrNotFound error;
// Delete of a missing key returns nil and writes nothing.
//
// # Update operations
//
// An update is a list of [Op] applied in order to a copy of the value (a
// missing key is null); if any op fails, nothing is written and the error
// is invalid_payload naming the op. An update whose result equals the
// current value writes nothing (no revision, no trigger event).
//
// Path is '.'-separated ("" is the value itself): a segment meeting an
// object selects a field, one meeting an array is a decimal index (no
// sign, no leading zeros). On the way to the target, missing or null
// fields become objects (except for remove); passing through a string,
// number or boolean, or an index out of range, is an error. Field names
// containing '.' cannot be addressed.
//
//	set       target = value (value may be anything, null included)
//	increment target = target + by; a missing or null target counts as 0;
//	          by defaults to 1; a non-number target is an error. Integer
//	          plus integer is exact and stays an integer; a result outside
//	          -2^63..2^64-1 is an error (invalid_payload, nothing written).
//	          With a float on either side the sum is a float64
//	decrement target = target - by, otherwise as increment
//	append    missing/null target: [value]; array: value appended as one
//	          element; string: value (a string) concatenated; else error
//	remove    without value: delete the field or array element at path
//	          (a missing path is a no-op; at the root the value becomes
//	          null, use Delete to delete the key); with value: remove every
//	          element of the array at path equal to value (missing/null: no-op;
//	          not an array: error)
//	merge     value must be an object; missing/null target: value; object
//	          target: value's fields replace the target's (shallow); else error
//
// by is only valid on increment/decrement, value not on them; a result
// that is not a finite number is an error. A result's integral floats are
// returned as the integers they are stored and read as (2.0 is 2). [Apply]
// is the evaluator, pure and usable on its own.
//
// # Functions
//
// [Serve] starts the worker "state" with state::get {scope, key} ->
// {value, revision} (value null and revision 0 when missing), state::set
// {scope, key, value} -> {old_value, new_value}, state::update {scope, key,
// ops[]} -> {old_value, new_value}, state::delete {scope, key} ->
// {old_value}, state::list {scope, prefix?, after?, limit?} -> {items:
// [{key, value, revision}], truncated?} (a list past the max payload is
// truncated; a page is never empty while items are left: one too large
// alone comes with value null and value_unavailable set). Payloads are
// JSON or msgpack; unknown fields, wrong types, bad scopes or keys are invalid_payload.
// Numbers keep the rule above both ways: a JSON request's integers are
// decoded exact, JSON replies write every digit, and msgpack replies carry
// integers as msgpack integers (int64, or uint64 above int64's range).
//
// A state::list page (sorted by key, after the key after) reads only its
// own values, with batch direct gets (nats-server 2.11 or later) bounded
// by the bytes the page can hold: a page reads a few max payloads at most
// (the server sends in stream order, so a page whose keys were written out
// of order reads a little past its own values), and walking a scope of n
// keys costs about n values, not n per page. Each item is encoded once; a
// JSON reply carries a value this store wrote as it is stored. For that the
// store keeps the sorted keys of each scope it pages through (at most 2^20
// keys in all, each scope's dropped after 5 idle minutes) and brings them up
// to date on every page from the messages written since; the first page,
// or one after more than 32 writes under the scope, lists the scope's
// subjects from the server's index instead (names only, no values).
//
// # State triggers
//
// [OnChange] runs a durable trigger: a JetStream consumer on the bucket's
// stream (KV_iii-state), filtered to a scope and key pattern, explicit ack,
// named by [ConsumerName] so every replica of one function shares it. Each
// change becomes an [Event] {event_type: state:created|state:updated|
// state:deleted, scope, key, old_value, new_value, revision} passed to the
// function; the event is acked when the call succeeds and redelivered with
// exponential backoff when it fails, times out, or nobody serves the
// function (function_not_found) — by default forever, so a worker that is
// down gets its events when it returns. [OnChangeFunc] does the same with
// a Go callback.
//
// created vs updated and old_value come from [HeaderPrevRevision]: the old
// value is read by revision from the bucket. When the bucket no longer
// holds it (more than History newer writes to the key happened before the
// event was handled), old_value is null and old_value_unavailable is true.
// For writes by foreign clients (no header) the key's history is searched
// instead. Because the bucket keeps only History revisions per key, a
// trigger lagging further than that behind on one key skips the oldest of
// its revisions (it always gets the latest). Delivery is at least once and,
// across concurrent events and retries, unordered: Revision grows per key,
// so a handler can drop stale events, or use [WithMaxAckPending](1).
//
// [OnChange] retries its setup while JetStream is unavailable for a moment
// (no answer, no responders, a cluster electing a leader) until ctx ends,
// and fails at once on what a retry cannot fix. A running [Subscription]
// keeps its consumer: deleted under it (nats consumer rm, or the stream
// deleted and created again; noticed at once, or within 30 s when the
// server does not report it), the trigger logs a warning with its function
// id and consumer, waits 0.5 s (doubling, up to 30 s, while it fails or is
// lost again soon after) and re-creates the consumer from the ack floor it
// last saw, or from the start of a re-created stream. Events after that
// floor come again; one whose call already succeeded in this process is
// acked without a second call (the process remembers up to 65536 of them
// above the floor; one acked by another replica may run again). The same
// memory acks without a second call an event redelivered because its ack
// was lost. [Subscription.Delete] deletes the consumer; replicas still
// running re-create it, so stop every replica first to remove a trigger.
//
// # Example
//
//	store, err := state.New(ctx, e)
//	old, _, err := store.Set(ctx, "orders", "o-1", map[string]any{"status": "new"})
//	_, v, err := store.Update(ctx, "orders", "o-1", []state.Op{
//		state.Set("status", "paid"),
//		state.Increment("stats.payments", 1),
//	})
//	w, err := state.Serve(ctx, e, store) // state::* on the bus
//	sub, err := state.OnChange(ctx, e, store, state.Trigger{
//		Scope: "orders", FunctionID: "billing::on_order",
//	})
//	defer sub.Stop()
package state
