package traces

const groupByRequestSchema = `{
  "type": "object",
  "properties": {
    "attribute": {"type": "string", "enum": ["iii.session.id", "iii.message.id", "iii.function.id"], "description": "span attribute to group by; spans without it are skipped"},
    "since_ms": {"type": "integer", "minimum": 0, "description": "keep only spans that ended at or after this Unix time in milliseconds; 0 or absent: all"},
    "limit": {"type": "integer", "minimum": 0, "maximum": 1000, "description": "most groups to return, newest first; 0 or absent: 100"}
  },
  "required": ["attribute"]
}`

const groupByResponseSchema = `{
  "type": "object",
  "properties": {
    "groups": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "value": {"type": "string", "description": "the attribute's value (a session id, message id or function id)"},
          "trace_ids": {"type": "array", "items": {"type": "string"}, "description": "the group's traces, newest first, at most 100"},
          "trace_count": {"type": "integer", "description": "distinct traces in the group"},
          "span_count": {"type": "integer"},
          "first_seen_ms": {"type": "integer", "description": "earliest span start, Unix ms"},
          "last_seen_ms": {"type": "integer", "description": "latest span end, Unix ms"},
          "duration_ms": {"type": "integer", "description": "last_seen_ms - first_seen_ms"},
          "error_count": {"type": "integer", "description": "spans with status error"}
        },
        "required": ["value", "trace_ids", "trace_count", "span_count", "first_seen_ms", "last_seen_ms", "duration_ms", "error_count"]
      }
    },
    "truncated": {"type": "boolean", "description": "more groups matched than the limit, or than fit one message"}
  },
  "required": ["groups"]
}`

const treeRequestSchema = `{
  "type": "object",
  "properties": {
    "trace_id": {"type": "string", "pattern": "^[0-9a-fA-F]{32}$", "description": "W3C trace id, 32 hex digits"}
  },
  "required": ["trace_id"]
}`

// spanSchema is one node of the tree; children are nodes again.
const spanSchema = `{
  "type": "object",
  "properties": {
    "trace_id": {"type": "string"},
    "span_id": {"type": "string", "description": "16 hex digits"},
    "parent_span_id": {"type": "string"},
    "name": {"type": "string", "description": "for a function call, the function id"},
    "kind": {"type": "string", "enum": ["internal", "server", "client", "producer", "consumer", "unspecified"]},
    "start_ns": {"type": "integer", "description": "Unix nanoseconds"},
    "end_ns": {"type": "integer"},
    "duration_ms": {"type": "number"},
    "status": {"type": "string", "enum": ["ok", "error", "unset"]},
    "status_message": {"type": "string"},
    "attributes": {"type": "object"},
    "links": {"type": "array", "items": {"type": "object", "properties": {"trace_id": {"type": "string"}, "span_id": {"type": "string"}, "attributes": {"type": "object"}}, "required": ["trace_id", "span_id"]}},
    "events": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}, "time_ns": {"type": "integer"}, "attributes": {"type": "object"}}, "required": ["name", "time_ns"]}},
    "resource": {"type": "object", "description": "the process's resource attributes (service.name, ...)"},
    "missing_parent": {"type": "boolean", "description": "the parent span is not in the store; the span is listed as a root"},
    "detached": {"type": "boolean", "description": "the span is 100 levels below a root; listed as a root, its parent is in the tree"},
    "children": {"type": "array", "items": {"$ref": "#/$defs/span"}}
  },
  "required": ["trace_id", "span_id", "name", "kind", "start_ns", "end_ns", "duration_ms", "status"]
}`

const treeResponseSchema = `{
  "type": "object",
  "$defs": {"span": ` + spanSchema + `},
  "properties": {
    "trace_id": {"type": "string"},
    "spans": {"type": "array", "items": {"$ref": "#/$defs/span"}, "description": "root spans by start time, each with its children"},
    "span_count": {"type": "integer", "description": "spans of the trace in the store"},
    "error_count": {"type": "integer"},
    "start_ms": {"type": "integer", "description": "earliest span start, Unix ms"},
    "duration_ms": {"type": "integer", "description": "from the earliest start to the latest end"},
    "truncated": {"type": "boolean", "description": "more than 5000 spans, or more than fit one message: the tree holds the earliest"}
  },
  "required": ["trace_id", "spans", "span_count", "error_count", "start_ms", "duration_ms"]
}`
