package sessiontree

// Skill documents of the functions (markdown with frontmatter), published
// to the skills bucket when the worker registers them.
const (
	createSkill = `---
title: Create a session
---
# session::create

Creates an empty session (no entries, no active leaf) and returns its id.

- ` + "`session_id`" + ` (optional): the id to use, 1–128 characters of ` + "`A-Za-z0-9_-`" + `, or ` + "`<region>.<name>`" + ` to keep the session's entries and metadata in that region (its iii nodes must have run there: otherwise ` + "`not_found`" + `). Omitted: a fresh ` + "`s_<nuid>`" + `.
- ` + "`display_name`" + ` (optional): up to 256 bytes, shown by lists and exports.

` + "```json" + `
{"display_name": "refactor the parser"}  →  {"session_id": "s_Qx3…"}
` + "```" + `

Errors: ` + "`conflict`" + ` when the id exists (use session::ensure to accept an existing one), ` + "`invalid_payload`" + ` for a bad id or name.
`

	ensureSkill = `---
title: Make sure a session exists
---
# session::ensure

Creates the session when it does not exist and answers ` + "`{session_id, created}`" + `. Safe to call before every run: an existing session is left as it is (its metadata is repaired if a writer stopped halfway, or rebuilt from its entries if it was deleted). ` + "`created`" + ` is true only for a session with no history.

` + "```json" + `
{"session_id": "s1"}  →  {"session_id": "s1", "created": true}
` + "```" + `

` + "`display_name`" + ` is used only when the session is created.
`

	getSkill = `---
title: Read a session's metadata
---
# session::get

Returns the session's metadata: ` + "`{session_id, display_name, created_at, updated_at, active_leaf, entry_count, forked_from?, summary, last_seq}`" + ` (times in Unix ms). ` + "`entry_count`" + ` counts the session's own entries; a fork shares the history before its fork point without counting it.

Errors: ` + "`not_found`" + ` for an unknown session.
`

	appendSkill = `---
title: Append one entry to a session
---
# session::append

Appends one entry under ` + "`parent_id`" + ` (default: the active leaf; the root when the session is empty) and makes it the active leaf. Answers ` + "`{entry_id}`" + `; the entry is durable when the call returns.

Pass either ` + "`message`" + ` (an AgentMessage) or ` + "`entry`" + `:

- ` + "`{type: \"message\", message}`" + `
- ` + "`{type: \"compaction\", summary, first_kept_entry_id?, tokens_before?}`" + `: the model then sees the summary followed by the messages from first_kept_entry_id (which must be on the path).
- ` + "`{type: \"branch_summary\", summary, from_entry_id}`" + `: the model sees the summary as a user message.
- ` + "`{type: \"custom\", custom_type, data}`" + `: application data the model never sees.

Appending under an older entry starts a branch. ` + "`dedup_id`" + ` makes a retry within ten minutes (the entry stream's duplicate window) answer the first attempt's entry instead of appending twice. A retry that may come later also sets ` + "`dedup_since_ms`" + `, the earliest time (Unix ms) the first attempt can have been stored: the entry is then looked up among the session's entries stored since, exact for any delay.

` + "```json" + `
{"session_id": "s1", "message": {"role": "user", "content": [{"type": "text", "text": "hi"}]}}  →  {"entry_id": "e4k"}
` + "```" + `

Errors: ` + "`not_found`" + ` (unknown session, or a parent that is not in this session's history), ` + "`invalid_payload`" + ` (bad ids, an invalid entry, an entry over 256 KiB encoded).
`

	appendBatchSkill = `---
title: Append a chain of entries
---
# session::append_batch

Appends ` + "`entries`" + ` (or ` + "`messages`" + `, as a shorthand) as a chain: the first under ` + "`parent_id`" + ` (default: the active leaf), each next under the one before; the last becomes the active leaf. Answers ` + "`{entry_ids}`" + ` in order. At most 1024 items.

Everything is validated before anything is written. If JetStream fails in the middle, the entries already stored stay (the error says how many); retrying with the same ` + "`dedup_id`" + ` completes the chain without repeating them (within ten minutes; later, with ` + "`dedup_since_ms`" + ` as for ` + "`session::append`" + `).

` + "```json" + `
{"session_id": "s1", "messages": [{"role": "assistant", …}, {"role": "function_result", …}]}  →  {"entry_ids": ["e4l", "e4m"]}
` + "```" + `
`

	messagesSkill = `---
title: Read the messages the model sees
---
# session::messages

Returns the model-facing messages of the path from the root to ` + "`leaf`" + ` (default: the active leaf), oldest first, as ` + "`{messages: [{entry_id, message}], path: [{entry_id, type}], leaf}`" + `.

With a compaction on the path, the list starts with its summary (a user message whose entry_id is the compaction's) followed by the messages from its first_kept_entry_id; compaction entries never appear verbatim, branch summaries appear as user messages, custom entries not at all. ` + "`path`" + ` lists the entries of the path for UIs. A fork's path continues into the session it was forked from.

An answer never outgrows the server's max payload. When more messages follow than one answer holds, it sets ` + "`truncated`" + `: ask again with ` + "`leaf`" + ` (the answer's) and ` + "`after`" + ` (the entry_id of the last message received) for the next ones. ` + "`path`" + ` holds the newest entries of the path that fit after the messages; ` + "`path_omitted`" + ` counts the older ones left out.

Errors: ` + "`not_found`" + ` for an unknown session or a leaf outside its history; ` + "`invalid_payload`" + ` for an ` + "`after`" + ` without ` + "`leaf`" + ` or that is not a message of the path.
`

	entriesSkill = `---
title: Read the raw entries of a path
---
# session::entries

Returns every entry on the path from the root to ` + "`leaf`" + ` (default: the active leaf), root first, as stored: ` + "`{entries: [{id, parent_id, type, timestamp, …}], leaf}`" + `, compactions and custom entries included.

An answer never outgrows the server's max payload. When more entries follow than one answer holds, it sets ` + "`truncated`" + `: ask again with ` + "`leaf`" + ` (the answer's) and ` + "`after`" + ` (the id of the last entry received) for the next ones.

Errors: ` + "`not_found`" + ` for an unknown session or a leaf outside its history; ` + "`invalid_payload`" + ` for an ` + "`after`" + ` without ` + "`leaf`" + ` or that is not an entry of the path.
`

	forkSkill = `---
title: Fork a session at an entry
---
# session::fork

Creates a new session whose history is the path up to and including ` + "`from_entry_id`" + ` (any entry of the session's history). The history is shared, not copied: the new session's metadata points at (session, entry) and its reads continue into the original. Its active leaf is the fork point, so the next append branches off there. Forks of forks work the same way.

` + "```json" + `
{"session_id": "s1", "from_entry_id": "e4k"}  →  {"session_id": "s_Zp…"}
` + "```" + `

` + "`new_session_id`" + ` and ` + "`display_name`" + ` are optional (the name defaults to the original's). A fork stays in the original's home region: ` + "`new_session_id`" + ` must have the same ` + "`<region>.`" + ` prefix (or none, for a session without one). Errors: ` + "`not_found`" + `, ` + "`conflict`" + ` when new_session_id exists, ` + "`invalid_payload`" + ` for a new_session_id of another region.
`

	cloneSkill = `---
title: Clone a session
---
# session::clone

A fork at ` + "`leaf`" + ` (default: the active leaf): a new session with the same current conversation, that can go on independently. A session with no entries clones into an empty one. Like a fork, a clone stays in the original's home region.
`

	treeSkill = `---
title: Show a session's tree
---
# session::tree

Returns every entry of the session as ` + "`{nodes: [{entry_id, parent_id, type, timestamp, summary, children_count, session_id}], active_leaf}`" + `: for a fork, first the shared path from the root to the fork point (their session_id is the original's), then the session's own entries, oldest first. ` + "`summary`" + ` is one line of the entry's content. Reads the whole session: use session::messages for the conversation itself.

An answer never outgrows the server's max payload. When more nodes follow than one answer holds, it sets ` + "`truncated`" + `: ask again with ` + "`after`" + ` (the entry_id of the last node received) for the next ones. Entries appended meanwhile come on later pages; a child count is the one its page read.

Errors: ` + "`not_found`" + ` for an unknown session; ` + "`invalid_payload`" + ` for an ` + "`after`" + ` that is not a node of the tree.
`

	listSkill = `---
title: List sessions
---
# session::list

Pages through sessions, most recently updated first: ` + "`{limit?, cursor?}`" + ` → ` + "`{sessions: [metadata], next_cursor?}`" + `. ` + "`limit`" + ` is 1–1000 (default 50); pass ` + "`next_cursor`" + ` back as ` + "`cursor`" + ` for the next page, until there is none. A page holds fewer than ` + "`limit`" + ` sessions when that many would outgrow the server's max payload. Each session's ` + "`summary`" + ` is its first user text, on one line.
`

	setActiveLeafSkill = `---
title: Move a session's active leaf
---
# session::set_active_leaf

Makes ` + "`entry_id`" + ` (any entry of the session's history) the active leaf: the next append without parent_id goes under it, and session::messages reads its path. This is how a UI switches branches or rewinds a conversation; nothing is deleted.
`

	exportHTMLSkill = `---
title: Export a conversation as HTML
---
# session::export_html

Renders the path to ` + "`leaf`" + ` (default: the active leaf) as one self-contained HTML page (inline CSS, no scripts, all text escaped): ` + "`{html, leaf, last_entry_id}`" + `. Save it to a file to share or archive a conversation.

An answer never outgrows the server's max payload. A longer page comes in parts, whole entries each: the answer sets ` + "`truncated`" + `; ask again with ` + "`leaf`" + ` (the answer's) and ` + "`after`" + ` (its ` + "`last_entry_id`" + `) for the next part, and append each part's ` + "`html`" + ` to the last: together they are the page. An entry too large for an answer of its own is shown with its texts cut and its images left out, with a note saying how many bytes.

Errors: ` + "`not_found`" + ` for an unknown session or a leaf outside its history; ` + "`invalid_payload`" + ` for an ` + "`after`" + ` without ` + "`leaf`" + ` or that is not an entry of the path.
`
)
