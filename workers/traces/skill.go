package traces

// groupBySkill is the skill document of engine::traces::group_by.
const groupBySkill = "---\n" +
	"title: Group traces by session, message or function\n" +
	"function_id: engine::traces::group_by\n" +
	"description: engine::traces::group_by lists, per session id, message id or function id, the traces and how many spans, errors and how much time they took, newest first.\n" +
	"---\n" +
	`# engine::traces::group_by

Every function call on the bus runs in a span named after the function id,
with the attributes ` + "`iii.function.id`" + `, and, inside a session,
` + "`iii.session.id`" + ` and ` + "`iii.message.id`" + `. The trace store
keeps the recent spans (the last 24 hours at most, and a bounded number in
memory). This function groups them by one of those attributes.

## When to use it

- Find the traces of a session (` + "`iii.session.id`" + `) or of one user
  message (` + "`iii.message.id`" + `), then read one with
  ` + "`engine::traces::tree`" + `.
- See which functions fail (` + "`error_count`" + `) or are slow
  (` + "`duration_ms`" + `), grouped by ` + "`iii.function.id`" + `.

## Arguments

| field | | |
|---|---|---|
| ` + "`attribute`" + ` | required | ` + "`iii.session.id`" + `, ` + "`iii.message.id`" + ` or ` + "`iii.function.id`" + `; anything else is invalid_payload |
| ` + "`since_ms`" + ` | optional | only spans that ended at or after this Unix time (ms) |
| ` + "`limit`" + ` | optional | groups to return, default 100, at most 1000 |

Spans without the attribute are skipped (a span outside any session has no
session id).

## Result

` + "`groups`" + `, newest (` + "`last_seen_ms`" + `) first, each
` + "`{value, trace_ids, trace_count, span_count, first_seen_ms, last_seen_ms, duration_ms, error_count}`" + `;
` + "`trace_ids`" + ` lists at most 100, newest first. ` + "`truncated`" + `
is true when more groups matched than the limit, or than fit one message.

## Example

` + "```json" + `
{"attribute": "iii.session.id", "limit": 1}
` + "```" + `
→
` + "```json" + `
{"groups": [{"value": "s-42", "trace_ids": ["4bf92f3577b34da6a3ce929d0e0e4736"], "trace_count": 1,
  "span_count": 12, "first_seen_ms": 1700000000000, "last_seen_ms": 1700000004200,
  "duration_ms": 4200, "error_count": 0}], "truncated": true}
` + "```" + `
`

// treeSkill is the skill document of engine::traces::tree.
const treeSkill = "---\n" +
	"title: Read one trace as a span tree\n" +
	"function_id: engine::traces::tree\n" +
	"description: engine::traces::tree returns the spans of one trace, each under its parent, children by start time, with status, timing, attributes and links.\n" +
	"---\n" +
	`# engine::traces::tree

Read what happened in one trace: which function called which, in what order,
how long each took, which failed and why.

## Arguments

` + "`{\"trace_id\": \"<32 hex digits>\"}`" + ` — from
` + "`engine::traces::group_by`" + `, a log line or a traceparent header.
A malformed id is invalid_payload; a trace the store does not hold (never
seen, older than the retention, or evicted) is not_found.

## Result

` + "`{trace_id, spans, span_count, error_count, start_ms, duration_ms, truncated?}`" + `.
` + "`spans`" + ` are the roots by start time; each span is
` + "`{trace_id, span_id, parent_span_id?, name, kind, start_ns, end_ns, duration_ms, status, status_message?, attributes, links?, events?, resource?, missing_parent?, children?}`" + `.
` + "`name`" + ` is the function id for a function call; ` + "`status`" + ` is
` + "`ok`" + `, ` + "`error`" + ` (the wire error code is in
` + "`status_message`" + `) or ` + "`unset`" + `.

A span whose parent is not in the store (not exported yet, or evicted) is
listed among the roots with ` + "`missing_parent: true`" + `. Links (to the
span that enqueued a queued call, say) stay on the span: follow them with
another ` + "`engine::traces::tree`" + ` call on the link's trace id.
A trace of more than 5000 spans, or of more than fit one message, comes
back with its earliest spans and ` + "`truncated: true`" + `. A span too large
to keep whole is held without its events, links and other attributes,
with ` + "`iii.traces.trimmed_bytes`" + ` set to its size.
`
