package anthropic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
)

// failure is a classified provider failure.
type failure struct {
	kind agent.ErrorKind
	// text says what failed, for the error event and the logs; it never
	// holds a credential.
	text string
	// retryAfter is the API's hint (Retry-After, retry-after-ms), 0 when
	// it gave none.
	retryAfter time.Duration
	status     int
	// partial is the answer streamed before the failure, if any.
	partial *agent.Message
	// cause is kept for errors.Is in the process.
	cause error
}

func (f *failure) Error() string { return f.text }
func (f *failure) Unwrap() error { return f.cause }

// wireError is the coded error of f for complete and models: rate_limited
// and transient are unavailable (retryable), auth_expired is forbidden,
// context_overflow is invalid_payload, permanent is internal. The details
// carry {"kind", "retry_after_ms"?, "status"?}.
func (f *failure) wireError() *wire.Error {
	var code wire.Code
	switch f.kind {
	case agent.ErrorRateLimited, agent.ErrorTransient:
		code = wire.CodeUnavailable
	case agent.ErrorAuthExpired:
		code = wire.CodeForbidden
	case agent.ErrorContextOverflow:
		code = wire.CodeInvalidPayload
	default:
		code = wire.CodeInternal
	}
	details := map[string]any{"kind": string(f.kind)}
	if f.retryAfter > 0 {
		details["retry_after_ms"] = f.retryAfter.Milliseconds()
	}
	if f.status > 0 {
		details["status"] = f.status
	}
	// Only the redacted text travels: the cause's text may quote the
	// response body.
	return wire.Errorf(code, "%s", f.text).WithDetails(details)
}

// classify turns the error of an API call (an HTTP error status, an error
// event of the stream, a network failure) into a failure:
//
//   - authentication_error, permission_error, 401, 403 → auth_expired;
//   - rate_limit_error, 429 → rate_limited, with the Retry-After hint;
//   - an invalid request that says the prompt is too long, 413 → context_overflow;
//   - overloaded_error, api_error, timeout_error, 5xx, 529, network → transient;
//   - any other error type or 4xx → permanent.
func classify(err error, now time.Time) *failure {
	var f *failure
	if errors.As(err, &f) {
		return f
	}
	var apiErr *sdk.Error
	if !errors.As(err, &apiErr) {
		if errors.Is(err, ErrMalformedStream) {
			return &failure{kind: agent.ErrorPermanent, text: err.Error(), cause: err}
		}
		// Connection refused or reset, a dropped stream, a timeout: the
		// request may well work again.
		return &failure{kind: agent.ErrorTransient, text: "anthropic: connection failed: " + networkText(err), cause: err}
	}
	f = &failure{status: apiErr.StatusCode, cause: err}
	typ := string(apiErr.Type())
	msg := apiErr.Message
	if msg == "" {
		msg = http.StatusText(apiErr.StatusCode)
	}
	// An error event of a stream arrives on a 200 response: its type is
	// what counts, not the status.
	status := apiErr.StatusCode
	if status < 400 {
		status = 0
	}
	if status > 0 {
		f.text = fmt.Sprintf("anthropic: %d %s: %s", status, orStatus(typ, status), msg)
	} else {
		f.text = fmt.Sprintf("anthropic: %s: %s", orStatus(typ, 0), msg)
	}
	if apiErr.Response != nil {
		f.retryAfter, _ = retryAfter(apiErr.Response.Header, now)
	}
	switch {
	case typ == "authentication_error" || typ == "permission_error" || status == http.StatusUnauthorized || status == http.StatusForbidden:
		f.kind = agent.ErrorAuthExpired
	case typ == "rate_limit_error" || status == http.StatusTooManyRequests:
		f.kind = agent.ErrorRateLimited
	case typ == "request_too_large" || status == http.StatusRequestEntityTooLarge:
		f.kind = agent.ErrorContextOverflow
	case (typ == "invalid_request_error" || status == http.StatusBadRequest) && contextOverflow(msg):
		f.kind = agent.ErrorContextOverflow
	case typ == "overloaded_error" || typ == "api_error" || typ == "timeout_error" || status >= 500:
		f.kind = agent.ErrorTransient
	case typ == "" && status == 0:
		// An error event of no known type: the stream broke on the
		// server's side.
		f.kind = agent.ErrorTransient
	default:
		f.kind = agent.ErrorPermanent
	}
	return f
}

func orStatus(typ string, status int) string {
	if typ != "" {
		return typ
	}
	if status > 0 {
		return "http_error"
	}
	return "error"
}

// contextOverflow reports whether an invalid request's message says the
// prompt does not fit the model's context window.
func contextOverflow(msg string) bool {
	m := strings.ToLower(msg)
	for _, s := range []string{"prompt is too long", "context window", "context limit", "context length", "too many tokens", "exceed context", "exceeds the context"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// networkText is a network error's text, short of Go's wrapping.
func networkText(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out"
	}
	return err.Error()
}

// maxRetryAfter bounds a parsed hint, so a silly value cannot overflow.
const maxRetryAfter = 24 * time.Hour

// retryAfter reads the API's wait hint: retry-after-ms (milliseconds), else
// Retry-After in seconds or as an HTTP date (relative to now). It reports
// false when there is no usable hint.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("retry-after-ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && ms <= float64(maxRetryAfter/time.Millisecond) {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if !(s >= 0 && s <= maxRetryAfter.Seconds()) { // NaN too
			return 0, false
		}
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		d := t.Sub(now)
		if d < 0 {
			d = 0
		}
		return min(d, maxRetryAfter), true
	}
	return 0, false
}

// redactor scrubs a secret out of texts that leave the process. The
// Messages API does not echo keys, but a proxy or a misconfigured base URL
// might.
type redactor string

func (r redactor) text(s string) string {
	if len(r) < 4 { // too short to be a key; replacing it would shred the text
		return s
	}
	return strings.ReplaceAll(s, string(r), "[redacted]")
}

// maxOddBody bounds what is read of a 200 answer that is not an event
// stream.
const maxOddBody = 16 << 10

// notEventStream is the failure of a 200 answer to a stream request whose
// body is not an event stream, nil for an event stream (or a body that
// does not say what it is, which the SSE decoder reads as one):
//
//   - HTML (a proxy's login or block page, a web app at the base URL) is
//     permanent: asking again gets the same page;
//   - JSON that is an API error (a gateway that answers errors with 200)
//     is classified as that error, with the Retry-After hint;
//   - any other JSON (a proxy that dropped "stream") is permanent.
//
// Read as an event stream, either body holds no event, and the call
// failed as a dropped connection (transient, retried).
func notEventStream(resp *http.Response, now time.Time) *failure {
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil {
		return nil
	}
	const what = "anthropic: the API answered 200 with Content-Type %s, not an event stream (a proxy's page, or a base_url that is not the Messages API?)"
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml":
		return &failure{kind: agent.ErrorPermanent, text: fmt.Sprintf(what, mt), status: resp.StatusCode}
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxOddBody))
		var apiErr *sdk.Error
		if err := streamError(resp, body); errors.As(err, &apiErr) && apiErr.Type() != "" {
			return classify(apiErr, now)
		}
		return &failure{kind: agent.ErrorPermanent, text: fmt.Sprintf(what, mt), status: resp.StatusCode}
	}
	return nil
}
