package compaction

// JSON Schemas of compaction::compact, shown by `nats micro info` and
// engine::functions::list.
const (
	idSchema = `{"type":"string","pattern":"^[A-Za-z0-9_-]{1,128}$"}`
	// sessionIDSchema: an id, or "<region>.<name>" for a session homed
	// in a region (subjects.ValidateSessionID).
	sessionIDSchema = `{"type":"string","maxLength":128,"pattern":"^([A-Za-z0-9_-]{1,64}\\.)?[A-Za-z0-9_-]+$",` +
		`"description":"the session: an id, or <region>.<name> for a session homed in a region"}`
	entryIDSchema = `{"type":"string","pattern":"^e[1-9a-z][0-9a-z]{0,12}$"}`

	compactRequestSchema = `{"type":"object","required":["session_id","provider","model"],"properties":{` +
		`"session_id":` + sessionIDSchema + `,` +
		`"provider":` + idSchema + `,` +
		`"model":{"type":"string","minLength":1,"maxLength":256},` +
		`"reason":{"enum":["threshold","overflow","manual"]},` +
		`"wait":{"type":"boolean","description":"wait for a running compaction and answer done_by_other (compact when it wrote nothing)"},` +
		`"keep_tokens":{"type":"integer","minimum":0,"maximum":1073741824,"description":"0: a quarter of the usable window"}}}`

	compactResponseSchema = `{"type":"object","required":["compacted","tokens_before","tokens_after"],"properties":{` +
		`"compacted":{"type":"boolean"},` +
		`"entry_id":` + entryIDSchema + `,` +
		`"first_kept_entry_id":` + entryIDSchema + `,` +
		`"tokens_before":{"type":"integer","minimum":0},` +
		`"tokens_after":{"type":"integer","minimum":0},` +
		`"reason":{"enum":["in_progress","nothing_to_compact","done_by_other"]},` +
		`"summary_calls":{"type":"integer","minimum":0}}}`
)

// compactSkill is compaction::compact's skill document.
const compactSkill = `---
title: Compact a session's context
---
# compaction::compact

Replaces the oldest part of a session's active path with a summary written by the session's own model, so the conversation fits in the model's context window again. The newest messages stay verbatim; ` + "`session::messages`" + ` then returns ` + "`[summary, ...kept messages]`" + `.

` + "```json" + `
{"session_id": "s1", "provider": "anthropic", "model": "claude-sonnet-4-5", "reason": "overflow", "wait": true}
→ {"compacted": true, "entry_id": "e4k", "first_kept_entry_id": "e4c", "tokens_before": 181234, "tokens_after": 41020, "summary_calls": 1}
` + "```" + `

- ` + "`keep_tokens`" + ` (optional): how much of the newest history stays verbatim; default a quarter of the usable window (context window minus a reserve for the answer).
- The kept part starts at a user message and never separates a function call from its result. The summary has the sections Goal, Constraints, Progress, Decisions, Function calls made, Next steps, Critical context, Files, and updates the previous summary when there is one. Large function outputs are pruned from what the summarizer reads.
- One compaction per session at a time. When another runs, the answer is ` + "`{compacted: false, reason: \"in_progress\"}`" + `, or with ` + "`wait: true`" + ` the call waits for it and answers ` + "`reason: \"done_by_other\"`" + ` (re-read the session), or compacts itself when the other one wrote nothing (it failed). ` + "`nothing_to_compact`" + ` means everything after the previous summary is kept.

Errors: ` + "`invalid_payload`" + ` for bad ids or a model the catalog does not know; ` + "`not_found`" + ` for an unknown session (or one homed in a region, ` + "`<region>.<name>`" + `, that has no stores); the provider's error when the summary cannot be written (nothing is appended then); ` + "`conflict`" + ` when the compaction lost its lease, or the session's active leaf moved meanwhile to a branch without the kept part (compact again).
`
