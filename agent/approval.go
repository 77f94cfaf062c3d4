package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// ApprovalStatus is the state of an [ApprovalRecord].
type ApprovalStatus string

// Approval statuses: a record is written pending by the orchestrator when
// it parks a call, turned decided (once, by compare-and-set) by
// approval::resolve, and deleted by the orchestrator when the turn consumed
// the decision or the run ended.
const (
	ApprovalPending ApprovalStatus = "pending"
	ApprovalDecided ApprovalStatus = "decided"
)

// Decisions of approval::resolve.
const (
	DecisionAllow   = "allow"
	DecisionDeny    = "deny"
	DecisionAborted = "aborted"
)

// ApprovalRecord is one parked call in the approvals bucket
// (subjects.ApprovalsBucket, key subjects.ApprovalKey). ArgsHash is
// [ArgsHash] of FunctionID and Args: a decision is only applied to the call
// whose hash it carries, so the call that runs is exactly the one shown.
// RunID ties the record to one run (call ids are only unique per run).
// Times are Unix milliseconds.
type ApprovalRecord struct {
	SessionID      string         `json:"session_id"`
	RunID          string         `json:"run_id"`
	FunctionCallID string         `json:"function_call_id"`
	FunctionID     string         `json:"function_id"`
	Args           map[string]any `json:"args"`
	ArgsHash       string         `json:"args_hash"`
	RequestedAt    int64          `json:"requested_at"`
	Status         ApprovalStatus `json:"status"`
	Decision       string         `json:"decision,omitempty"`
	Reason         string         `json:"reason,omitempty"`
	DecidedAt      int64          `json:"decided_at,omitempty"`
	// DecidedTrace is the W3C trace context of the approval::resolve call
	// that decided: the run's resumed work links to it.
	DecidedTrace map[string]string `json:"decided_trace,omitempty"`
}

// ApprovalMode is a session's approval setting.
type ApprovalMode string

// Approval modes. A policy deny always stands; the mode only changes what
// happens to a call the policy answers needs_approval for:
//   - manual (the default): it parks until a human decides, unless its
//     function matches an always_allow pattern;
//   - auto: it runs without asking when its function is declared
//     idempotent in the catalog (read-only by declaration) or matches
//     always_allow; anything else parks;
//   - full: it runs without asking.
const (
	ApprovalManual ApprovalMode = "manual"
	ApprovalAuto   ApprovalMode = "auto"
	ApprovalFull   ApprovalMode = "full"
)

// Valid reports whether m is a known mode ("" is not).
func (m ApprovalMode) Valid() bool {
	return m == ApprovalManual || m == ApprovalAuto || m == ApprovalFull
}

// ApprovalSettings are one session's approval settings
// (subjects.ApprovalSettingsBucket, key = session id). AlwaysAllow holds
// function id patterns ('*' is the only glob, anchored, as in the policy
// file). Only humans change them: the function that does is on the
// chokepoint's human-only list, which no policy rule can open.
type ApprovalSettings struct {
	SessionID   string       `json:"session_id"`
	Mode        ApprovalMode `json:"mode"`
	AlwaysAllow []string     `json:"always_allow"`
	UpdatedAt   int64        `json:"updated_at,omitempty"`
}

// ArgsHash is the hash an approval binds to: "sha256:" and the hex SHA-256
// of the canonical JSON of [functionID, args] (object keys sorted, no
// insignificant space; nil args hash like {}), args taken as they read
// back from JSON ([UnmarshalJSONExact]). Two calls hash equal exactly when
// their function ids and JSON-equal arguments are, whichever codec carried
// them and however often they were stored and read back: -0 hashes as 0,
// which is what its JSON -0 reads back as.
func ArgsHash(functionID string, args map[string]any) (string, error) {
	if args == nil {
		args = map[string]any{}
	}
	// encoding/json sorts map keys and writes no spaces. One round trip
	// makes the text a fixed point: a call gated again after a crash has
	// its arguments read back from the turn record, and a hash that
	// changed there would replace its pending approval, decision and all.
	b, err := json.Marshal(args)
	if err != nil {
		return "", fmt.Errorf("%w: arguments of %s do not encode: %v", ErrInvalidMessage, functionID, err)
	}
	var back map[string]any
	if err := UnmarshalJSONExact(b, &back); err != nil {
		return "", fmt.Errorf("%w: arguments of %s do not read back: %v", ErrInvalidMessage, functionID, err)
	}
	if b, err = json.Marshal([]any{functionID, back}); err != nil {
		return "", fmt.Errorf("%w: arguments of %s do not encode: %v", ErrInvalidMessage, functionID, err)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
