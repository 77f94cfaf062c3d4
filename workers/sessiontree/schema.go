package sessiontree

// JSON Schemas of the functions, shown by `nats micro info` and
// engine::functions::list.
const (
	idSchema        = `{"type":"string","pattern":"^[A-Za-z0-9_-]{1,128}$"}`
	sessionIDSchema = `{"type":"string","maxLength":128,"pattern":"^([A-Za-z0-9_-]{1,64}\\.)?[A-Za-z0-9_-]+$",` +
		`"description":"an id, or <region>.<name> for a session homed in that region"}`
	entryIDSchema   = `{"type":"string","pattern":"^e[1-9a-z][0-9a-z]{0,12}$"}`
	entryTypeSchema = `{"enum":["message","compaction","branch_summary","custom"]}`

	messageSchema = `{"type":"object","required":["role"],"properties":{` +
		`"role":{"enum":["user","assistant","function_result"]},` +
		`"content":{"type":["array","null"],"items":{"type":"object","required":["type"],"properties":{` +
		`"type":{"enum":["text","image","thinking","function_call"]},"text":{"type":"string"},` +
		`"mime":{"type":"string"},"data":{"type":"string"},"id":{"type":"string"},` +
		`"function_id":{"type":"string"},"arguments":{"type":"object"},"signature":{"type":"string"}}}},` +
		`"timestamp":{"type":"integer"},"stop_reason":{"type":"string"},"usage":{"type":"object"},` +
		`"model":{"type":"string"},"provider":{"type":"string"},"error_message":{"type":"string"},` +
		`"function_call_id":{"type":"string"},"function_id":{"type":"string"},"details":{},"is_error":{"type":"boolean"}}}`

	entryPayloadProperties = `"type":` + entryTypeSchema + `,` +
		`"timestamp":{"type":"integer","minimum":0,"description":"Unix ms; 0 or absent: now"},` +
		`"message":` + messageSchema + `,` +
		`"summary":{"type":"string","description":"compaction and branch_summary"},` +
		`"first_kept_entry_id":` + entryIDSchema + `,` +
		`"tokens_before":{"type":"integer","minimum":0},` +
		`"from_entry_id":` + entryIDSchema + `,` +
		`"custom_type":{"type":"string","maxLength":128},` +
		`"data":{"description":"custom: any JSON value"}`

	newEntrySchema = `{"type":"object","required":["type"],"properties":{` + entryPayloadProperties + `}}`

	entrySchema = `{"type":"object","required":["id","type","timestamp"],"properties":{` +
		`"id":` + entryIDSchema + `,"parent_id":` + entryIDSchema + `,` + entryPayloadProperties + `}}`

	metaSchema = `{"type":"object","required":["session_id","created_at","updated_at","entry_count"],"properties":{` +
		`"session_id":` + sessionIDSchema + `,"display_name":{"type":"string"},` +
		`"created_at":{"type":"integer"},"updated_at":{"type":"integer"},` +
		`"active_leaf":` + entryIDSchema + `,"entry_count":{"type":"integer"},` +
		`"forked_from":{"type":"object","properties":{"session_id":` + sessionIDSchema + `,"entry_id":` + entryIDSchema + `}},` +
		`"summary":{"type":"string"},"last_seq":{"type":"integer"}}}`

	createRequestSchema = `{"type":"object","properties":{` +
		`"session_id":` + sessionIDSchema + `,"display_name":{"type":"string","maxLength":256}}}`

	createResponseSchema = `{"type":"object","required":["session_id"],"properties":{"session_id":` + sessionIDSchema + `}}`

	ensureRequestSchema = `{"type":"object","required":["session_id"],"properties":{` +
		`"session_id":` + sessionIDSchema + `,"display_name":{"type":"string","maxLength":256}}}`

	ensureResponseSchema = `{"type":"object","required":["session_id","created"],"properties":{` +
		`"session_id":` + sessionIDSchema + `,"created":{"type":"boolean"}}}`

	sessionRequestSchema = `{"type":"object","required":["session_id"],"properties":{"session_id":` + sessionIDSchema + `}}`

	appendRequestSchema = `{"type":"object","required":["session_id"],"properties":{` +
		`"session_id":` + sessionIDSchema + `,"parent_id":` + entryIDSchema + `,` +
		`"entry":` + newEntrySchema + `,"message":` + messageSchema + `,` +
		`"dedup_id":` + idSchema + `,"dedup_since_ms":{"type":"integer","minimum":0},` +
		`"defer_meta":{"type":"boolean","description":"write the session's meta up to the meta delay later, once per burst"}},` +
		`"oneOf":[{"required":["entry"]},{"required":["message"]}]}`

	appendResponseSchema = `{"type":"object","required":["entry_id"],"properties":{"entry_id":` + entryIDSchema + `}}`

	appendBatchRequestSchema = `{"type":"object","required":["session_id"],"properties":{` +
		`"session_id":` + sessionIDSchema + `,"parent_id":` + entryIDSchema + `,` +
		`"entries":{"type":"array","maxItems":1024,"items":` + newEntrySchema + `},` +
		`"messages":{"type":"array","maxItems":1024,"items":` + messageSchema + `},` +
		`"dedup_id":` + idSchema + `,"dedup_since_ms":{"type":"integer","minimum":0},` +
		`"defer_meta":{"type":"boolean","description":"write the session's meta up to the meta delay later, once per burst"}},` +
		`"oneOf":[{"required":["entries"]},{"required":["messages"]}]}`

	appendBatchResponseSchema = `{"type":"object","required":["entry_ids"],"properties":{"entry_ids":{"type":"array","items":` + entryIDSchema + `}}}`

	readRequestSchema = `{"type":"object","required":["session_id"],"properties":{` +
		`"session_id":` + sessionIDSchema + `,"leaf":` + entryIDSchema + `}}`

	messagesRequestSchema = `{"type":"object","required":["session_id"],"properties":{` +
		`"session_id":` + sessionIDSchema + `,"leaf":` + entryIDSchema + `,` +
		`"after":{"type":"string","pattern":"^e[1-9a-z][0-9a-z]{0,12}$",` +
		`"description":"continue a truncated answer: the entry_id of the last message received (with leaf: the answer's leaf)"}}}`

	entriesRequestSchema = `{"type":"object","required":["session_id"],"properties":{` +
		`"session_id":` + sessionIDSchema + `,"leaf":` + entryIDSchema + `,` +
		`"after":{"type":"string","pattern":"^e[1-9a-z][0-9a-z]{0,12}$",` +
		`"description":"continue a truncated answer: the id of the last entry received (with leaf: the answer's leaf)"}}}`

	treeRequestSchema = `{"type":"object","required":["session_id"],"properties":{` +
		`"session_id":` + sessionIDSchema + `,` +
		`"after":{"type":"string","pattern":"^e[1-9a-z][0-9a-z]{0,12}$",` +
		`"description":"continue a truncated answer: the entry_id of the last node received"}}}`

	exportHTMLRequestSchema = `{"type":"object","required":["session_id"],"properties":{` +
		`"session_id":` + sessionIDSchema + `,"leaf":` + entryIDSchema + `,` +
		`"after":{"type":"string","pattern":"^e[1-9a-z][0-9a-z]{0,12}$",` +
		`"description":"continue a truncated answer: its last_entry_id (with leaf: the answer's leaf)"}}}`

	messagesResponseSchema = `{"type":"object","required":["messages","path"],"properties":{` +
		`"leaf":` + entryIDSchema + `,` +
		`"truncated":{"type":"boolean","description":"more messages follow than the server's max payload lets one answer hold: ask again with leaf and after"},` +
		`"path_omitted":{"type":"integer","minimum":0,"description":"the oldest entries of the path left out of path to fit the server's max payload"},` +
		`"messages":{"type":"array","items":{"type":"object","required":["entry_id","message"],"properties":{"entry_id":` + entryIDSchema + `,"message":` + messageSchema + `}}},` +
		`"path":{"type":"array","items":{"type":"object","required":["entry_id","type"],"properties":{"entry_id":` + entryIDSchema + `,"type":` + entryTypeSchema + `}}}}}`

	entriesResponseSchema = `{"type":"object","required":["entries"],"properties":{` +
		`"leaf":` + entryIDSchema + `,"entries":{"type":"array","items":` + entrySchema + `},` +
		`"truncated":{"type":"boolean","description":"more entries follow than the server's max payload lets one answer hold: ask again with leaf and after"}}}`

	forkRequestSchema = `{"type":"object","required":["session_id","from_entry_id"],"properties":{` +
		`"session_id":` + sessionIDSchema + `,"from_entry_id":` + entryIDSchema + `,` +
		`"new_session_id":` + sessionIDSchema + `,"display_name":{"type":"string","maxLength":256}}}`

	cloneRequestSchema = `{"type":"object","required":["session_id"],"properties":{` +
		`"session_id":` + sessionIDSchema + `,"leaf":` + entryIDSchema + `,` +
		`"new_session_id":` + sessionIDSchema + `,"display_name":{"type":"string","maxLength":256}}}`

	treeResponseSchema = `{"type":"object","required":["session_id","nodes"],"properties":{` +
		`"session_id":` + sessionIDSchema + `,"active_leaf":` + entryIDSchema + `,` +
		`"nodes":{"type":"array","items":{"type":"object","required":["entry_id","type","timestamp","summary","children_count","session_id"],"properties":{` +
		`"entry_id":` + entryIDSchema + `,"parent_id":` + entryIDSchema + `,"type":` + entryTypeSchema + `,` +
		`"timestamp":{"type":"integer"},"summary":{"type":"string"},"children_count":{"type":"integer"},"session_id":` + sessionIDSchema + `}}},` +
		`"truncated":{"type":"boolean","description":"more nodes follow than the server's max payload lets one answer hold: ask again with after"}}}`

	listRequestSchema = `{"type":"object","properties":{` +
		`"limit":{"type":"integer","minimum":0,"maximum":1000,"description":"0 or absent: 50"},` +
		`"cursor":{"type":"string","description":"next_cursor of the previous page"}}}`

	listResponseSchema = `{"type":"object","required":["sessions"],"properties":{` +
		`"sessions":{"type":"array","items":` + metaSchema + `,"description":"at most limit; fewer when limit would outgrow the server's max payload"},` +
		`"next_cursor":{"type":"string","description":"set when more sessions follow"}}}`

	setActiveLeafRequestSchema = `{"type":"object","required":["session_id","entry_id"],"properties":{` +
		`"session_id":` + sessionIDSchema + `,"entry_id":` + entryIDSchema + `}}`

	setActiveLeafResponseSchema = `{"type":"object","required":["session_id","active_leaf"],"properties":{` +
		`"session_id":` + sessionIDSchema + `,"active_leaf":` + entryIDSchema + `}}`

	exportHTMLResponseSchema = `{"type":"object","required":["html"],"properties":{` +
		`"html":{"type":"string","description":"the page, or a part of it: the parts of a truncated export, concatenated in order, are the whole page"},` +
		`"leaf":` + entryIDSchema + `,"last_entry_id":` + entryIDSchema + `,` +
		`"truncated":{"type":"boolean","description":"the rest of the page is more than the server's max payload lets one answer hold: ask again with leaf and after = last_entry_id"}}}`
)
