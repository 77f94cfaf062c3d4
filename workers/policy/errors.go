package policy

import (
	"errors"
	"fmt"
)

// Sentinel errors.
var (
	// ErrInvalidPolicy is wrapped by every error of [Parse]: a policy file
	// that does not parse, has an unknown key or a wrong type, or a pattern,
	// regex or condition that does not compile. A watched file with such an
	// error is rejected whole.
	ErrInvalidPolicy = errors.New("policy: invalid policy")
	// ErrStarted is returned by [Worker.Start] and [Watcher.Start] when
	// called twice.
	ErrStarted = errors.New("policy: already started")
	// ErrClosed is returned by [Watcher.Start] after [Watcher.Close].
	ErrClosed = errors.New("policy: closed")
)

// ParseError is a policy file error at a place in the file. errors.Is(err,
// [ErrInvalidPolicy]) holds for every ParseError.
type ParseError struct {
	// Rule is the index of the offending rule in rules (0-based), or -1
	// when the error is outside the rules list.
	Rule int
	// Line is the 1-based line of the offending node, or 0 when unknown.
	Line int
	// Msg says what is wrong.
	Msg string
}

// Error reads "policy: rules[3] (line 12): ...".
func (e *ParseError) Error() string {
	where := ""
	switch {
	case e.Rule >= 0 && e.Line > 0:
		where = fmt.Sprintf("rules[%d] (line %d): ", e.Rule, e.Line)
	case e.Rule >= 0:
		where = fmt.Sprintf("rules[%d]: ", e.Rule)
	case e.Line > 0:
		where = fmt.Sprintf("line %d: ", e.Line)
	}
	return "policy: invalid policy: " + where + e.Msg
}

// Unwrap makes errors.Is(err, ErrInvalidPolicy) hold.
func (e *ParseError) Unwrap() error { return ErrInvalidPolicy }
