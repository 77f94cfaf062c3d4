package agent

import (
	"fmt"

	"github.com/iii-on-nats/iii/subjects"
	"unicode"
	"unicode/utf8"
)

// MaxIDLen bounds every id: session, message, workspace, agent, idempotency
// and function call ids. It equals subjects.MaxIDLen.
const MaxIDLen = subjects.MaxIDLen

// maxNameLen bounds free-form names that are not ids: model names and
// function ids.
const maxNameLen = 256

// ValidateID checks an id that becomes a subject or key token: 1 to
// [MaxIDLen] characters of [A-Za-z0-9_-] (subjects.ValidateID, the one
// rule; the error also wraps [ErrInvalidID]). kind names the id in the
// error ("session_id").
func ValidateID(kind, id string) error {
	if err := subjects.ValidateID(kind, id); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidID, err)
	}
	return nil
}

// ValidateCallID checks a function call id chosen by a model provider
// ("toolu_01…", "call_…"). Providers use a wider alphabet than
// [ValidateID] allows, so the rule is the one approval::resolve enforces:
// 1 to [MaxIDLen] bytes of valid UTF-8 with no '/', '.', '*', '>',
// whitespace or control character.
func ValidateCallID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: function call id is empty", ErrInvalidID)
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("%w: function call id is longer than %d bytes", ErrInvalidID, MaxIDLen)
	}
	if !utf8.ValidString(id) {
		return fmt.Errorf("%w: function call id is not valid UTF-8", ErrInvalidID)
	}
	for _, r := range id {
		switch {
		case r == '/' || r == '.' || r == '*' || r == '>':
			return fmt.Errorf("%w: function call id %q contains %q", ErrInvalidID, id, r)
		case unicode.IsSpace(r) || unicode.IsControl(r):
			return fmt.Errorf("%w: function call id %q contains whitespace or a control character", ErrInvalidID, id)
		}
	}
	return nil
}

// validName checks a free-form name (model, function id): 1 to 256 bytes
// of valid UTF-8 with no whitespace or control character.
func validName(kind, s string) error {
	if s == "" {
		return fmt.Errorf("%s is empty", kind)
	}
	if len(s) > maxNameLen {
		return fmt.Errorf("%s is longer than %d bytes", kind, maxNameLen)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s is not valid UTF-8", kind)
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("%s %q contains whitespace or a control character", kind, s)
		}
	}
	return nil
}

// ValidateSessionID checks a session id: an id, or "<region>.<name>" for a
// session homed in region (subjects.ValidateSessionID; the error also
// wraps [ErrInvalidID]).
func ValidateSessionID(sid string) error {
	if err := subjects.ValidateSessionID(sid); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidID, err)
	}
	return nil
}
