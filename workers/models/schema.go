package models

// JSON Schemas of the functions, shown by engine::functions::list and
// `nats micro info models`.

const modelSchema = `{
  "type": "object",
  "properties": {
    "id": {"type": "string"},
    "provider": {"type": "string"},
    "display_name": {"type": "string"},
    "aliases": {"type": "array", "items": {"type": "string"}},
    "context_window": {"type": "integer"},
    "max_output_tokens": {"type": "integer"},
    "supports_tools": {"type": "boolean"},
    "supports_vision": {"type": "boolean"},
    "supports_thinking": {"type": "boolean"},
    "supports_cache": {"type": "boolean"},
    "pricing": {
      "type": "object",
      "description": "USD per million tokens",
      "properties": {
        "input_per_1m": {"type": "number"},
        "output_per_1m": {"type": "number"},
        "cache_read_per_1m": {"type": "number"},
        "cache_write_per_1m": {"type": "number"}
      }
    },
    "available": {"type": "boolean", "description": "false once models::reconcile found the provider no longer lists it"},
    "reconciled": {"type": "boolean", "description": "listed by the provider, unknown to the catalog: capabilities false, prices zero"}
  },
  "required": ["id", "provider", "context_window", "max_output_tokens", "pricing", "available"]
}`

const providerProp = `"provider": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,128}$"}`

const modelIDProp = `"model_id": {"type": "string", "minLength": 1, "maxLength": 256, "description": "a model id or alias; no whitespace or control character"}`

const capabilityProp = `"capability": {"enum": ["tools", "vision", "thinking", "cache"]}`

const listRequestSchema = `{
  "type": "object",
  "properties": {
    ` + providerProp + `,
    ` + capabilityProp + `,
    "after": {"type": "string", "description": "continue a truncated list: <provider>/<id> of the last model received"}
  }
}`

const listResponseSchema = `{
  "type": "object",
  "properties": {
    "models": {"type": "array", "items": ` + modelSchema + `},
    "truncated": {"type": "boolean", "description": "the server's max payload cut the list: ask again with after"}
  },
  "required": ["models"]
}`

const getRequestSchema = `{
  "type": "object",
  "properties": {
    ` + providerProp + `,
    ` + modelIDProp + `
  },
  "required": ["provider", "model_id"]
}`

const getResponseSchema = `{"oneOf": [{"type": "null"}, ` + modelSchema + `]}`

const supportsRequestSchema = `{
  "type": "object",
  "properties": {
    ` + providerProp + `,
    ` + modelIDProp + `,
    ` + capabilityProp + `
  },
  "required": ["provider", "model_id", "capability"]
}`

const supportsResponseSchema = `{
  "type": "object",
  "properties": {"supported": {"type": "boolean"}},
  "required": ["supported"]
}`

const reconcileRequestSchema = `{
  "type": "object",
  "properties": {
    ` + providerProp + `
  },
  "required": ["provider"]
}`

const reconcileResponseSchema = `{
  "type": "object",
  "properties": {
    "provider": {"type": "string"},
    "known": {"type": "array", "items": {"type": "string"}, "description": "listed ids the catalog has"},
    "added": {"type": "array", "items": {"type": "string"}, "description": "listed ids the catalog lacks, stored as reconciled models"},
    "missing": {"type": "array", "items": {"type": "string"}, "description": "models the provider no longer lists, marked available false"},
    "skipped": {"type": "integer", "description": "listed models dropped: an invalid or repeated id"},
    "dropped": {"type": "integer", "description": "reconciled models deleted from the catalog: missing longer than the retention (30 days by default)"},
    "known_omitted": {"type": "integer", "description": "ids left out of known to fit the server's max payload"},
    "added_omitted": {"type": "integer", "description": "ids left out of added to fit the server's max payload"},
    "missing_omitted": {"type": "integer", "description": "ids left out of missing to fit the server's max payload"}
  },
  "required": ["provider", "known", "added", "missing"]
}`
