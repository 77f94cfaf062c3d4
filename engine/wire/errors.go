package wire

import (
	"errors"
	"fmt"
	"strconv"
)

// Code is a wire error code. Every code a function may answer with is in
// [Catalog]; nothing else goes on the wire.
type Code string

// The catalog's codes.
const (
	CodeFunctionNotFound Code = "function_not_found"
	CodeInvalidPayload   Code = "invalid_payload"
	CodeTimeout          Code = "timeout"
	CodeForbidden        Code = "forbidden"
	CodeInternal         Code = "internal"
	CodeNotFound         Code = "not_found"
	CodeConflict         Code = "conflict"
	CodeNotPending       Code = "not_pending"
	CodeUnavailable      Code = "unavailable"
	CodeBudgetExceeded   Code = "budget_exceeded"
	CodeCanceled         Code = "canceled"
)

// Entry describes one catalog code: its numeric status for the
// Nats-Service-Error-Code header, whether a caller may retry it by default,
// and what it means.
type Entry struct {
	Code      Code
	Status    int
	Retryable bool
	Meaning   string
}

// Catalog is every wire error code, in documentation order. docs/PROTOCOL.md
// lists the same table (a test keeps them equal).
var Catalog = []Entry{
	{CodeInvalidPayload, 400, false, "the request does not decode, fails validation, names an invalid id, or is larger than the server's max payload (nothing is sent or stored)"},
	{CodeForbidden, 403, false, "the caller may not do this (policy, human-only function)"},
	{CodeNotFound, 404, false, "the named object (key, session, entry, message) does not exist"},
	{CodeFunctionNotFound, 404, false, "no worker has registered the function id (NATS answered no responders)"},
	{CodeConflict, 409, true, "a compare-and-set lost to a concurrent writer, or the object is busy"},
	{CodeNotPending, 409, false, "an approval decision for a call that is not waiting for one"},
	{CodeCanceled, 499, false, "the caller's context was canceled"},
	{CodeInternal, 500, false, "the handler failed unexpectedly (a bug, or a dependency error)"},
	{CodeBudgetExceeded, 402, false, "the spend ceiling of a budget is reached"},
	{CodeUnavailable, 503, true, "a dependency (JetStream, a worker) is not reachable right now"},
	{CodeTimeout, 504, true, "no reply before the deadline"},
}

var byCode = func() map[Code]Entry {
	m := make(map[Code]Entry, len(Catalog))
	for _, e := range Catalog {
		m[e.Code] = e
	}
	return m
}()

// Lookup returns the catalog entry of code; unknown codes read as internal.
func Lookup(code Code) (Entry, bool) {
	e, ok := byCode[code]
	if !ok {
		return byCode[CodeInternal], false
	}
	return e, true
}

// Error is a coded wire error. Two Errors match with errors.Is when their
// codes are equal, so the sentinels below work for any message.
type Error struct {
	Code      Code           `json:"code"`
	Message   string         `json:"message"`
	Retryable bool           `json:"retryable"`
	Details   map[string]any `json:"details,omitempty"`
	// cause is the local error this one wraps (never sent on the wire).
	cause error
}

func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

// Is matches another *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Unwrap returns the local cause, if any.
func (e *Error) Unwrap() error { return e.cause }

// Status is the numeric code of the Nats-Service-Error-Code header.
func (e *Error) Status() int {
	ent, _ := Lookup(e.Code)
	return ent.Status
}

// Sentinels, one per catalog code, for errors.Is.
var (
	ErrFunctionNotFound = &Error{Code: CodeFunctionNotFound}
	ErrInvalidPayload   = &Error{Code: CodeInvalidPayload}
	ErrTimeout          = &Error{Code: CodeTimeout}
	ErrForbidden        = &Error{Code: CodeForbidden}
	ErrInternal         = &Error{Code: CodeInternal}
	ErrNotFound         = &Error{Code: CodeNotFound}
	ErrConflict         = &Error{Code: CodeConflict}
	ErrNotPending       = &Error{Code: CodeNotPending}
	ErrUnavailable      = &Error{Code: CodeUnavailable}
	ErrBudgetExceeded   = &Error{Code: CodeBudgetExceeded}
	ErrCanceled         = &Error{Code: CodeCanceled}
)

// Errorf builds a coded error with the catalog's retryable default.
func Errorf(code Code, format string, args ...any) *Error {
	ent, _ := Lookup(code)
	return &Error{Code: ent.Code, Message: fmt.Sprintf(format, args...), Retryable: ent.Retryable}
}

// Wrap builds a coded error that keeps cause for errors.Is/As locally; only
// the code and message travel.
func Wrap(code Code, cause error, format string, args ...any) *Error {
	e := Errorf(code, format, args...)
	if cause != nil {
		if e.Message == "" {
			e.Message = cause.Error()
		} else {
			e.Message += ": " + cause.Error()
		}
	}
	e.cause = cause
	return e
}

// WithDetails returns a copy of e carrying details.
func (e *Error) WithDetails(details map[string]any) *Error {
	c := *e
	c.Details = details
	return &c
}

// Permanent returns a copy of e that callers must not retry, whatever
// its code's default: a conflict no retry can win (an id that is taken),
// an unavailable that will stay so (too many redirects).
func (e *Error) Permanent() *Error {
	c := *e
	c.Retryable = false
	return &c
}

// From converts any error into a wire error: an *Error in the chain is
// returned as is; anything else becomes internal.
func From(err error) *Error {
	if err == nil {
		return nil
	}
	var we *Error
	if errors.As(err, &we) {
		return we
	}
	return Wrap(CodeInternal, err, "")
}

// Envelope is the body of an error reply.
type Envelope struct {
	Error *Error `json:"error"`
}

// Headers are the NATS services error headers for e.
func (e *Error) Headers() map[string]string {
	return map[string]string{
		"Nats-Service-Error":      e.Error(),
		"Nats-Service-Error-Code": strconv.Itoa(e.Status()),
	}
}
