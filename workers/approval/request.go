package approval

import (
	"strings"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/agent"
)

// Bounds of the requests.
const (
	// MaxReasonBytes bounds the reason of a decision (UTF-8 bytes).
	MaxReasonBytes = 4 << 10
	// MaxAlwaysAllow bounds the always_allow list of a session, counted
	// before duplicates are dropped.
	MaxAlwaysAllow = 256
)

// argsHashPrefix starts every args hash ([agent.ArgsHash]).
const argsHashPrefix = "sha256:"

// ResolveRequest is the request of approval::resolve.
type ResolveRequest struct {
	// SessionID is the session whose call is decided
	// ([agent.ValidateSessionID]: an id, or "<region>.<name>" for a session
	// homed in region).
	SessionID string `json:"session_id"`
	// FunctionCallID is the model's id of the parked call
	// ([agent.ValidateCallID]: no '/', '.', '*', '>' or whitespace).
	FunctionCallID string `json:"function_call_id"`
	// Decision is agent.DecisionAllow, DecisionDeny or DecisionAborted
	// (abort the whole run).
	Decision string `json:"decision"`
	// Reason is optional free text, at most [MaxReasonBytes] of UTF-8.
	Reason string `json:"reason,omitempty"`
	// ArgsHash, when given, must equal the record's args_hash: it binds the
	// decision to the arguments the human was shown ("sha256:" and 64 hex
	// digits, either case).
	ArgsHash string `json:"args_hash,omitempty"`
}

// Validate checks the request; every error is invalid_payload.
func (r ResolveRequest) Validate() error {
	if err := agent.ValidateSessionID(r.SessionID); err != nil {
		return invalidWrap(err)
	}
	if err := agent.ValidateCallID(r.FunctionCallID); err != nil {
		return invalidWrap(err)
	}
	switch r.Decision {
	case agent.DecisionAllow, agent.DecisionDeny, agent.DecisionAborted:
	default:
		return invalid("decision must be %q, %q or %q, not %.64q", agent.DecisionAllow, agent.DecisionDeny, agent.DecisionAborted, r.Decision)
	}
	if len(r.Reason) > MaxReasonBytes {
		return invalid("reason is %d bytes, longer than %d", len(r.Reason), MaxReasonBytes)
	}
	if !utf8.ValidString(r.Reason) {
		return invalid("reason is not valid UTF-8")
	}
	if r.ArgsHash != "" && !validArgsHash(r.ArgsHash) {
		return invalid("args_hash %.80q is not \"sha256:\" and 64 hex digits", r.ArgsHash)
	}
	return nil
}

func validArgsHash(h string) bool {
	hex, ok := strings.CutPrefix(h, argsHashPrefix)
	if !ok || len(hex) != 64 {
		return false
	}
	for i := 0; i < len(hex); i++ {
		c := hex[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// ResolveResponse is the answer of approval::resolve: the decision as
// recorded.
type ResolveResponse struct {
	OK bool `json:"ok"`
	// AlreadyDecided is true when this call did not decide: the call had
	// been decided before with this very decision and reason (a retry
	// after a lost reply), and is answered from what was recorded.
	AlreadyDecided bool `json:"already_decided,omitempty"`
	// Decision is the recorded decision (the request's).
	Decision string `json:"decision"`
	// DecidedAt is when it was recorded, Unix milliseconds: that of the
	// first call when AlreadyDecided.
	DecidedAt int64 `json:"decided_at"`
}

// ListPendingRequest is the request of approval::list_pending.
type ListPendingRequest struct {
	// SessionID, when given, limits the list to one session.
	SessionID string `json:"session_id,omitempty"`
}

// Validate checks the request; every error is invalid_payload.
func (r ListPendingRequest) Validate() error {
	if r.SessionID == "" {
		return nil
	}
	if err := agent.ValidateSessionID(r.SessionID); err != nil {
		return invalidWrap(err)
	}
	return nil
}

// Pending is one call waiting for a human: [agent.PendingApproval] with
// its session. Args is never null (absent arguments read as {});
// RequestedAt is Unix milliseconds.
type Pending struct {
	SessionID      string         `json:"session_id"`
	FunctionCallID string         `json:"function_call_id"`
	FunctionID     string         `json:"function_id"`
	Args           map[string]any `json:"args"`
	ArgsHash       string         `json:"args_hash"`
	RequestedAt    int64          `json:"requested_at"`
}

// ListPendingResponse is the answer of approval::list_pending, oldest
// first; Pending is never null. Omitted counts the newer pending calls left
// out because the answer would not fit the server's max payload: decide
// the listed ones, or list one session, to see them. It also counts any
// call too large to be listed even alone, which is passed over (the newer
// calls are listed): decide it by its id.
type ListPendingResponse struct {
	Pending []Pending `json:"pending"`
	Omitted int       `json:"omitted,omitempty"`
}

// SettingsGetRequest is the request of approval::settings::get.
type SettingsGetRequest struct {
	SessionID string `json:"session_id"`
}

// Validate checks the request; every error is invalid_payload.
func (r SettingsGetRequest) Validate() error {
	if err := agent.ValidateSessionID(r.SessionID); err != nil {
		return invalidWrap(err)
	}
	return nil
}

// SettingsSetRequest is the request of approval::settings::set. A field
// left out (or null) keeps its current value; always_allow [] clears the
// list. A Go caller clears it with a pointer to an empty, non-nil slice: a
// pointer to a nil slice encodes as null, which keeps.
type SettingsSetRequest struct {
	SessionID   string              `json:"session_id"`
	Mode        *agent.ApprovalMode `json:"mode"`
	AlwaysAllow *[]string           `json:"always_allow"`
}

// Validate checks the request; every error is invalid_payload. A pattern
// of "*" is refused (mode "full" says that explicitly).
func (r SettingsSetRequest) Validate() error {
	if err := agent.ValidateSessionID(r.SessionID); err != nil {
		return invalidWrap(err)
	}
	if r.Mode != nil && !r.Mode.Valid() {
		return invalid("mode must be %q, %q or %q, not %.64q", agent.ApprovalManual, agent.ApprovalAuto, agent.ApprovalFull, string(*r.Mode))
	}
	if r.AlwaysAllow != nil {
		if n := len(*r.AlwaysAllow); n > MaxAlwaysAllow {
			return invalid("always_allow has %d patterns, more than %d", n, MaxAlwaysAllow)
		}
		for i, p := range *r.AlwaysAllow {
			if err := agent.ValidatePattern(p); err != nil {
				return invalid("always_allow[%d]: %v", i, err)
			}
		}
	}
	return nil
}

// dedupe returns the patterns without repeats, in first-seen order, never
// nil.
func dedupe(patterns []string) []string {
	out := make([]string, 0, len(patterns))
	seen := make(map[string]struct{}, len(patterns))
	for _, p := range patterns {
		if _, ok := seen[p]; ok {
			continue
		}
		seen[p] = struct{}{}
		out = append(out, p)
	}
	return out
}

const resolveRequestSchema = `{
  "type": "object",
  "properties": {
    "session_id": {"type": "string", "maxLength": 128, "pattern": "^([A-Za-z0-9_-]{1,64}\\.)?[A-Za-z0-9_-]+$"},
    "function_call_id": {"type": "string", "minLength": 1, "maxLength": 128, "description": "the parked call's id; no '/', '.', '*', '>' or whitespace"},
    "decision": {"enum": ["allow", "deny", "aborted"], "description": "aborted aborts the whole run"},
    "reason": {"type": "string", "maxLength": 4096},
    "args_hash": {"type": "string", "pattern": "^sha256:[0-9a-fA-F]{64}$", "description": "when given, the decision only applies if the call's arguments still hash to it"}
  },
  "required": ["session_id", "function_call_id", "decision"]
}`

const resolveResponseSchema = `{
  "type": "object",
  "properties": {
    "ok": {"const": true},
    "already_decided": {"type": "boolean", "description": "true when the call had already been decided with this same decision and reason (a retry after a lost reply): nothing new was decided; absent otherwise"},
    "decision": {"enum": ["allow", "deny", "aborted"], "description": "the recorded decision"},
    "decided_at": {"type": "integer", "description": "when it was recorded, Unix milliseconds"}
  },
  "required": ["ok", "decision", "decided_at"]
}`

const listPendingRequestSchema = `{
  "type": "object",
  "properties": {
    "session_id": {"type": "string", "maxLength": 128, "pattern": "^([A-Za-z0-9_-]{1,64}\\.)?[A-Za-z0-9_-]+$", "description": "only this session's calls"}
  }
}`

const listPendingResponseSchema = `{
  "type": "object",
  "properties": {
    "pending": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "session_id": {"type": "string"},
          "function_call_id": {"type": "string"},
          "function_id": {"type": "string"},
          "args": {"type": "object"},
          "args_hash": {"type": "string"},
          "requested_at": {"type": "integer", "description": "Unix milliseconds"}
        },
        "required": ["session_id", "function_call_id", "function_id", "args", "args_hash", "requested_at"]
      }
    },
    "omitted": {"type": "integer", "description": "pending calls left out because the answer would exceed the server's max payload (the newer ones, and any call too large to list alone); absent when none"}
  },
  "required": ["pending"]
}`

const settingsGetRequestSchema = `{
  "type": "object",
  "properties": {
    "session_id": {"type": "string", "maxLength": 128, "pattern": "^([A-Za-z0-9_-]{1,64}\\.)?[A-Za-z0-9_-]+$"}
  },
  "required": ["session_id"]
}`

const settingsSetRequestSchema = `{
  "type": "object",
  "properties": {
    "session_id": {"type": "string", "maxLength": 128, "pattern": "^([A-Za-z0-9_-]{1,64}\\.)?[A-Za-z0-9_-]+$"},
    "mode": {"enum": ["manual", "auto", "full"], "description": "omitted: keep the current mode"},
    "always_allow": {"type": "array", "maxItems": 256, "items": {"type": "string", "minLength": 1, "maxLength": 256}, "description": "function id patterns ('*' globs, anchored; a lone '*' is refused); omitted: keep the current list"}
  },
  "required": ["session_id"]
}`

const settingsResponseSchema = `{
  "type": "object",
  "properties": {
    "session_id": {"type": "string"},
    "mode": {"enum": ["manual", "auto", "full"]},
    "always_allow": {"type": "array", "items": {"type": "string"}},
    "updated_at": {"type": "integer", "description": "Unix milliseconds; absent until first set"}
  },
  "required": ["session_id", "mode", "always_allow"]
}`
