package agent

import "errors"

// Sentinel errors. Every Validate error wraps exactly one of them, so a
// function handler can map it onto the wire catalog (invalid_payload) with
// errors.Is.
var (
	// ErrInvalidID is returned for a session, message, workspace, agent or
	// idempotency id that is not 1–128 characters of [A-Za-z0-9_-], and for
	// a function call id that is empty, longer than 128 bytes or contains
	// '/', '.', '*', '>', whitespace or a control character.
	ErrInvalidID = errors.New("agent: invalid id")
	// ErrInvalidMessage is returned for a message or content block with an
	// unknown role or type, or one that misses a field its kind requires.
	ErrInvalidMessage = errors.New("agent: invalid message")
	// ErrInvalidRunStart is returned for a [RunStart] with no messages, no
	// provider or model, an unknown mode or a negative max_turns.
	ErrInvalidRunStart = errors.New("agent: invalid run start")
	// ErrInvalidModelEvent is returned for a [ModelEvent] with an unknown
	// type or one that misses the field its type requires.
	ErrInvalidModelEvent = errors.New("agent: invalid model event")
)
