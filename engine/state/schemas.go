package state

// JSON Schemas (draft 2020-12) of the state functions, published in the
// function catalog. The handlers check the same rules and more (key
// segments, sizes, op semantics); the schemas are documentation for callers
// and tools.
const (
	schemaScope = `{"type":"string","pattern":"^[A-Za-z0-9_-]{1,128}$","description":"one token: letters, digits, '_' and '-'"}`
	schemaKey   = `{"type":"string","minLength":1,"maxLength":512,"description":"'/'-separated segments, none empty"}`

	schemaKeyRequest = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
		`"properties":{"scope":` + schemaScope + `,"key":` + schemaKey + `},` +
		`"required":["scope","key"],"additionalProperties":false}`
	schemaGetRequest = schemaKeyRequest

	schemaGetResponse = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
		`"properties":{"value":{"description":"the stored JSON value, integers exact (int64, or uint64 above it); null when the key does not exist"},` +
		`"revision":{"type":"integer","minimum":0,"description":"0 when the key does not exist"}},` +
		`"required":["value","revision"]}`

	schemaSetRequest = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
		`"properties":{"scope":` + schemaScope + `,"key":` + schemaKey + `,"value":{"description":"any JSON value; integers are stored and answered exact (int64, or uint64 above it), other numbers as float64"}},` +
		`"required":["scope","key","value"],"additionalProperties":false}`

	schemaOp = `{"type":"object","properties":{` +
		`"type":{"enum":["set","increment","decrement","append","remove","merge"]},` +
		`"path":{"type":"string","description":"'.'-separated path into the value; \"\" is the value itself; array elements by decimal index"},` +
		`"value":{"description":"operand of set, append, merge (an object) and remove (element to remove; omit to remove the path)"},` +
		`"by":{"type":"number","description":"operand of increment and decrement (default 1); integer plus integer is exact (a result outside -2^63..2^64-1 is invalid_payload), a float on either side makes a float"}},` +
		`"required":["type"],"additionalProperties":false}`

	schemaUpdateRequest = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
		`"properties":{"scope":` + schemaScope + `,"key":` + schemaKey + `,` +
		`"ops":{"type":"array","minItems":1,"maxItems":256,"items":` + schemaOp + `}},` +
		`"required":["scope","key","ops"],"additionalProperties":false}`

	schemaChangeResponse = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
		`"properties":{"old_value":{"description":"the value before; null when the key did not exist"},` +
		`"new_value":{"description":"the value after"}},"required":["old_value","new_value"]}`

	schemaDeleteResponse = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
		`"properties":{"old_value":{"description":"the deleted value; null when the key did not exist"}},"required":["old_value"]}`

	schemaListRequest = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
		`"properties":{"scope":` + schemaScope + `,` +
		`"prefix":{"type":"string","description":"\"\" for the whole scope; \"a/b\" for a/b and the keys below it; \"a/b/\" for the keys below a/b only"},` +
		`"after":{"type":"string","description":"only keys sorting after this one (paging)"},` +
		`"limit":{"type":"integer","minimum":0,"description":"at most this many items; 0 is no limit"}},` +
		`"required":["scope"],"additionalProperties":false}`

	schemaListResponse = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
		`"properties":{"items":{"type":"array","items":{"type":"object","properties":{` +
		`"key":{"type":"string"},"value":{},"revision":{"type":"integer"},` +
		`"value_unavailable":{"type":"boolean","description":"the value alone would not fit in one message; value is null, read it with state::get"}},` +
		`"required":["key","value","revision"]}},` +
		`"truncated":{"type":"boolean","description":"more items follow: ask again with after set to the last key"}},` +
		`"required":["items"]}`
)
