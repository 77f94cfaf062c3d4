package policy

import (
	"bytes"
	"encoding/json"
)

// CheckRequest is the request of policy::check_permissions.
type CheckRequest struct {
	// FunctionID is the function the caller wants to call. An invalid id
	// is not a payload error: the answer is a deny with rule_id
	// invalid_function_id.
	FunctionID string `json:"function_id"`
	// Args are the call's arguments, any JSON value (absent is {}).
	Args any `json:"args,omitempty"`
}

// UnmarshalJSON decodes the request keeping the numbers of args exact
// (json.Number, made canonical by the check): the default decoding makes
// every number a float64, which rounds an integer past 2^53, so a JSON
// caller's 1234567890123456789 slipped past a deny rule that equals it
// while the handler, decoding into an int64, read it exactly.
func (r *CheckRequest) UnmarshalJSON(data []byte) error {
	type plain CheckRequest
	var p plain
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		return err
	}
	*r = CheckRequest(p)
	return nil
}

// StatusRequest is the (empty) request of policy::status and
// policy::reload; unknown fields are ignored.
type StatusRequest struct{}

const emptyRequestSchema = `{"type":"object"}`

const checkRequestSchema = `{
  "type": "object",
  "properties": {
    "function_id": {"type": "string", "description": "the function the caller wants to call"},
    "args": {"description": "the call's arguments (any JSON value; absent is {})"}
  },
  "required": ["function_id"]
}`

const checkResponseSchema = `{
  "type": "object",
  "properties": {
    "decision": {"enum": ["allow", "deny", "needs_approval"]},
    "rule_id": {"type": "string", "description": "rule-<index>, the rule's id, or one of invalid_function_id, args_too_large, args_too_deep, ambiguous_args, invalid_args"},
    "matched_constraint": {"type": "string"},
    "reason": {"type": "string"}
  },
  "required": ["decision"]
}`

const statusResponseSchema = `{
  "type": "object",
  "properties": {
    "file": {"type": "string"},
    "source": {"enum": ["file", "default"]},
    "loaded_at": {"type": "string", "format": "date-time"},
    "rules": {"type": "integer"},
    "sha256": {"type": "string"},
    "last_error": {"type": "string"}
  },
  "required": ["file", "source", "loaded_at", "rules", "sha256"]
}`
