package budget

const idPattern = `"type": "string", "pattern": "^[A-Za-z0-9_-]{1,128}$"`

const amount = `"type": "number", "minimum": 0, "maximum": 1000000000`

const createRequestSchema = `{
  "type": "object",
  "properties": {
    "budget_id": {` + idPattern + `, "description": "default b_<nuid>; an existing id is a conflict"},
    "ceiling_usd": {"type": "number", "exclusiveMinimum": 0, "maximum": 1000000000},
    "period": {"enum": ["day", "week", "month"], "description": "UTC calendar window: midnight, ISO week (Monday), 1st of the month"},
    "workspace_id": {` + idPattern + `},
    "agent_id": {` + idPattern + `},
    "alert_thresholds": {"type": ["array", "null"], "maxItems": 16, "items": {"type": "number", "exclusiveMinimum": 0, "maximum": 1}, "description": "fractions of the ceiling; null or absent: [0.5, 0.8, 1]"}
  },
  "required": ["ceiling_usd", "period"],
  "anyOf": [{"required": ["workspace_id"]}, {"required": ["agent_id"]}]
}`

const budgetSchema = `{
  "type": "object",
  "properties": {
    "budget_id": {"type": "string"},
    "ceiling_usd": {"type": "number"},
    "period": {"enum": ["day", "week", "month"]},
    "workspace_id": {"type": "string"},
    "agent_id": {"type": "string"},
    "alert_thresholds": {"type": "array", "items": {"type": "number"}},
    "created_at": {"type": "integer", "description": "Unix milliseconds"}
  },
  "required": ["budget_id", "ceiling_usd", "period", "alert_thresholds", "created_at"]
}`

const deleteRequestSchema = `{
  "type": "object",
  "properties": {"budget_id": {` + idPattern + `}},
  "required": ["budget_id"]
}`

const deleteResponseSchema = `{
  "type": "object",
  "properties": {"deleted": {"type": "boolean"}},
  "required": ["deleted"]
}`

const afterProperty = `"after": {` + idPattern + `, "description": "continue a truncated answer: the budget_id of its last budget"}`

const truncatedProperty = `"truncated": {"type": "boolean", "description": "the max payload cut the answer short: ask again with after"}`

const listRequestSchema = `{
  "type": "object",
  "properties": {` + afterProperty + `}
}`

const listResponseSchema = `{
  "type": "object",
  "properties": {"budgets": {"type": "array", "items": ` + budgetSchema + `}, ` + truncatedProperty + `},
  "required": ["budgets"]
}`

// selectorProperties pick budgets: budget_id alone, or workspace_id and/or
// agent_id (every budget a call for them is subject to).
const selectorProperties = `
    "budget_id": {` + idPattern + `, "description": "one budget; excludes workspace_id and agent_id"},
    "workspace_id": {` + idPattern + `},
    "agent_id": {` + idPattern + `}`

const statusSchema = `{
  "type": "object",
  "properties": {
    "budget_id": {"type": "string"},
    "ceiling_usd": {"type": "number"},
    "period": {"enum": ["day", "week", "month"]},
    "workspace_id": {"type": "string"},
    "agent_id": {"type": "string"},
    "period_start": {"type": "integer", "description": "Unix milliseconds"},
    "period_end": {"type": "integer", "description": "Unix milliseconds, exclusive"},
    "spent_usd": {"type": "number"},
    "reserved_usd": {"type": "number"},
    "remaining_usd": {"type": "number", "minimum": 0}
  },
  "required": ["budget_id", "ceiling_usd", "period", "period_start", "period_end", "spent_usd", "reserved_usd", "remaining_usd"]
}`

const statusesSchema = `{
  "type": "object",
  "properties": {"budgets": {"type": "array", "items": ` + statusSchema + `}},
  "required": ["budgets"]
}`

const checkRequestSchema = `{
  "type": "object",
  "properties": {` + selectorProperties + `,
    "estimated_usd": {` + amount + `}
  }
}`

const checkResponseSchema = `{
  "type": "object",
  "properties": {
    "allowed": {"type": "boolean"},
    "budgets": {"type": "array", "items": ` + statusSchema + `}
  },
  "required": ["allowed", "budgets"]
}`

const reserveRequestSchema = `{
  "type": "object",
  "properties": {` + selectorProperties + `,
    "estimated_usd": {` + amount + `},
    "reservation_id": {` + idPattern + `, "description": "idempotency key; names the reservation for budget::settle"},
    "ttl_ms": {"type": "integer", "minimum": 1000, "maximum": 86400000, "description": "hold lifetime when never settled; default 15 minutes"}
  },
  "required": ["estimated_usd", "reservation_id"]
}`

const reserveResponseSchema = `{
  "type": "object",
  "properties": {
    "reservation_id": {"type": "string"},
    "budgets": {"type": "array", "items": ` + statusSchema + `},
    "existing": {"type": "boolean", "description": "an earlier reserve of this id granted it; this one holds nothing more"},
    "estimated_usd": {"type": "number", "description": "with existing: the earlier reserve's estimate"},
    "state": {"type": "string", "enum": ["held", "settling", "settled"], "description": "with existing: the reservation's state"}
  },
  "required": ["reservation_id", "budgets"]
}`

const settleRequestSchema = `{
  "type": "object",
  "properties": {
    "reservation_id": {` + idPattern + `},
    "actual_usd": {` + amount + `}
  },
  "required": ["reservation_id", "actual_usd"]
}`

const usageRequestSchema = `{
  "type": "object",
  "properties": {` + selectorProperties + `,
    ` + afterProperty + `
  }
}`

const usageResponseSchema = `{
  "type": "object",
  "properties": {"budgets": {"type": "array", "items": ` + statusSchema + `}, ` + truncatedProperty + `},
  "required": ["budgets"]
}`
