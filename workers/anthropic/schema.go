package anthropic

import (
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers"
)

// JSON Schemas of the functions, shown by `nats micro info` and
// engine::functions::list.
const (
	messageSchema = `{"type":"object","required":["role"],"properties":{` +
		`"role":{"enum":["user","assistant","function_result"]},` +
		`"content":{"type":["array","null"],"items":{"type":"object","required":["type"],"properties":{` +
		`"type":{"enum":["text","image","thinking","function_call"]},"text":{"type":"string"},` +
		`"mime":{"type":"string"},"data":{"type":"string"},"id":{"type":"string"},` +
		`"function_id":{"type":"string"},"arguments":{"type":"object"}}}},` +
		`"timestamp":{"type":"integer"},"stop_reason":{"type":"string"},"usage":{"type":"object"},` +
		`"model":{"type":"string"},"provider":{"type":"string"},"error_message":{"type":"string"},` +
		`"function_call_id":{"type":"string"},"function_id":{"type":"string"},"details":{},"is_error":{"type":"boolean"}}}`

	toolSchema = `{"type":"object","required":["function_id"],"properties":{` +
		`"function_id":{"type":"string","minLength":1},"description":{"type":"string"},` +
		`"input_schema":{"type":"object","description":"JSON Schema of the arguments (an object schema)"}}}`

	requestProperties = `"system_prompt":{"type":"string","description":"sent as a cached system block"},` +
		`"model":{"type":"string","minLength":1,"maxLength":256,"description":"an Anthropic model id, e.g. claude-sonnet-4-5"},` +
		`"messages":{"type":"array","minItems":1,"items":` + messageSchema + `},` +
		`"tools":{"type":"array","items":` + toolSchema + `},` +
		`"max_tokens":{"type":"integer","minimum":0,"description":"0: the model's largest output (8192 for unknown models)"},` +
		`"thinking_level":{"enum":["","off","low","medium","high"]},` +
		`"session_id":` + subjects.SessionIDSchema

	completeRequestSchema = `{"type":"object","required":["model","messages"],"properties":{` + requestProperties + `}}`

	streamResponseSchema = `{"type":"object","required":["stop_reason"],"properties":{` +
		`"stop_reason":{"enum":["end","length","function_call","aborted","error"]},` +
		`"kind":{"enum":["auth_expired","rate_limited","context_overflow","transient","permanent"]},` +
		workers.TranscriptKeptProperty + `}}`

	modelsRequestSchema = `{"type":"object"}`

	modelsResponseSchema = `{"type":"object","required":["models"],"properties":{"models":{"type":"array","items":{` +
		`"type":"object","required":["id"],"properties":{"id":{"type":"string"},"display_name":{"type":"string"},` +
		`"created_at":{"type":"string","format":"date-time"},"context_window":{"type":"integer"},"max_output_tokens":{"type":"integer"}}}}}}`
)

// streamRequestSchema: a continuation sends no messages, so they may be
// empty here.
var streamRequestSchema = workers.StreamRequestSchema(requestProperties, messageSchema)
