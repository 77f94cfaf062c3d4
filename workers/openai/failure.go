package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	sdk "github.com/openai/openai-go/v3"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
)

// maxErrorText bounds the error text of a failure.
const maxErrorText = 1024

// maxErrorBody bounds what is read of an error response's body.
const maxErrorBody = 16 << 10

// failure is why a model call failed, classified. Its text never holds a
// credential: it is built from scrubbed parts.
type failure struct {
	kind       agent.ErrorKind
	text       string
	retryAfter time.Duration
	// status is the HTTP status of a refused request (0 for a failure
	// of the stream or the transport): only a 401 is worth asking auth for
	// another credential.
	status int
}

func (f *failure) Error() string { return string(f.kind) + ": " + f.text }

// wireError is the coded error of a failure for complete and models: its
// details carry the kind ({"kind", "retry_after_ms"?}). rate_limited and
// transient are unavailable (retryable), auth_expired is forbidden,
// context_overflow is invalid_payload, permanent is internal.
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
	return wire.Errorf(code, "%s", f.text).WithDetails(details)
}

// apiError is the error object of an OpenAI-style error body or error
// chunk: {"error": {"message", "type", "code"}}. code is a string at
// OpenAI and a number at some compatible servers.
type apiError struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
}

// code returns the error code as text and, when it is a number, as one.
func (e *apiError) code() (string, int) {
	raw := bytes.TrimSpace(e.Code)
	if len(raw) == 0 || string(raw) == "null" {
		return "", 0
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		n, _ := strconv.Atoi(s)
		return s, n
	}
	var f float64
	if json.Unmarshal(raw, &f) == nil && f >= 0 && f < 1000 {
		return strconv.Itoa(int(f)), int(f)
	}
	return "", 0
}

// parseErrorBody reads the error object of an error body: {"error": {…}}
// (OpenAI), {"error": "text"} (some servers), or {"message": …}; anything
// else is taken as text.
func parseErrorBody(body []byte) apiError {
	body = bytes.TrimSpace(body)
	var env struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &env) == nil {
		var e apiError
		if len(env.Error) > 0 && json.Unmarshal(env.Error, &e) == nil {
			return e
		}
		var s string
		if len(env.Error) > 0 && json.Unmarshal(env.Error, &s) == nil {
			return apiError{Message: s}
		}
		if env.Message != "" {
			return apiError{Message: env.Message}
		}
	}
	return apiError{Message: string(body)}
}

// overflowHints are what servers say when the prompt does not fit the
// model's context.
var overflowHints = []string{
	"context_length_exceeded", "context length", "context window", "maximum context",
	"too many tokens", "prompt is too long", "input is too long", "reduce the length",
	"exceeds the model", "maximum prompt length",
}

func isOverflow(e *apiError) bool {
	code, _ := e.code()
	s := strings.ToLower(e.Message + " " + e.Type + " " + code)
	for _, h := range overflowHints {
		if strings.Contains(s, h) {
			return true
		}
	}
	return false
}

// statusKind classifies an HTTP error status: 401 and 403 are
// auth_expired; 429 rate_limited (insufficient_quota, which waiting does
// not cure, is permanent); a 400, 413 or 422 about the context's size is
// context_overflow (413 always); 408, 409, 425 and 5xx (529 included) are
// transient; other 4xx are permanent.
func statusKind(status int, e *apiError) agent.ErrorKind {
	code, _ := e.code()
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return agent.ErrorAuthExpired
	case status == http.StatusTooManyRequests:
		if code == "insufficient_quota" || e.Type == "insufficient_quota" {
			return agent.ErrorPermanent
		}
		return agent.ErrorRateLimited
	case status == http.StatusRequestEntityTooLarge:
		return agent.ErrorContextOverflow
	case status == http.StatusBadRequest || status == http.StatusUnprocessableEntity:
		if isOverflow(e) {
			return agent.ErrorContextOverflow
		}
		return agent.ErrorPermanent
	case status == http.StatusRequestTimeout || status == http.StatusConflict || status == http.StatusTooEarly || status >= 500:
		return agent.ErrorTransient
	}
	return agent.ErrorPermanent
}

// streamErrorKind classifies an error chunk of a stream: by its numeric
// code when it has one, by its type and code otherwise; an error the
// server gives no reason for is transient.
func streamErrorKind(e *apiError) agent.ErrorKind {
	code, n := e.code()
	if n >= 400 {
		return statusKind(n, e)
	}
	s := strings.ToLower(e.Type + " " + code)
	switch {
	case isOverflow(e):
		return agent.ErrorContextOverflow
	case strings.Contains(s, "insufficient_quota"):
		return agent.ErrorPermanent
	case strings.Contains(s, "rate_limit"):
		return agent.ErrorRateLimited
	case strings.Contains(s, "auth") || strings.Contains(s, "api_key") || strings.Contains(s, "permission"):
		return agent.ErrorAuthExpired
	case strings.Contains(s, "invalid_request"):
		return agent.ErrorPermanent
	}
	return agent.ErrorTransient
}

// scrubber removes secrets (the credential, the configured header values)
// from texts that leave the provider.
type scrubber []string

// minSecret is the shortest value the scrubber replaces: shorter header
// values (an organization flag, "true") are not secrets and would garble
// texts.
const minSecret = 8

func (s scrubber) with(secret string) scrubber {
	if len(secret) < minSecret {
		return s
	}
	return append(s[:len(s):len(s)], secret)
}

func (s scrubber) clean(text string) string {
	for _, v := range s {
		text = strings.ReplaceAll(text, v, "[redacted]")
	}
	if len(text) > maxErrorText {
		text = truncate(text, maxErrorText) + "…"
	}
	return text
}

// requestFailure classifies the failure of a request that did not start
// streaming: an HTTP error (from the SDK's error or the raw response) or
// a transport error.
func (p *Provider) requestFailure(err error, resp *http.Response, sc scrubber) *failure {
	var sdkErr *sdk.Error
	if resp == nil && errors.As(err, &sdkErr) {
		resp = sdkErr.Response
	}
	if resp != nil && resp.StatusCode >= 400 {
		// The SDK leaves the error body readable on the response.
		var e apiError
		if resp.Body != nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
			e = parseErrorBody(body)
		}
		if e.Message == "" && sdkErr != nil {
			e.Message = sdkErr.Message
		}
		status := resp.StatusCode
		kind := statusKind(status, &e)
		text := fmt.Sprintf("%s: HTTP %d %s", p.o.name, status, http.StatusText(status))
		if msg := strings.TrimSpace(e.Message); msg != "" {
			text += ": " + msg
		}
		f := &failure{kind: kind, text: sc.clean(text), status: status}
		if kind == agent.ErrorRateLimited || kind == agent.ErrorTransient {
			f.retryAfter = retryAfter(resp.Header, p.o.now())
		}
		return f
	}
	return &failure{kind: transportKind(err), text: sc.clean(p.o.name + ": " + transportText(err))}
}

// errorChunkFailure classifies an error a server sent in place of a chunk:
// {"error": {"message", "type", "code"}} (raw is the error object, or the
// whole event of an "event: error").
func (p *Provider) errorChunkFailure(raw string, sc scrubber) *failure {
	e := parseErrorBody([]byte(`{"error":` + raw + `}`))
	if !json.Valid([]byte(raw)) {
		e = apiError{Message: raw}
	}
	text := p.o.name + ": the server sent an error"
	if msg := strings.TrimSpace(e.Message); msg != "" {
		text += ": " + msg
	}
	return &failure{kind: streamErrorKind(&e), text: sc.clean(text)}
}

// notEventStream is the failure of a 200 answer to a stream request whose
// body is not an event stream, nil for an event stream (or any other
// body, which the SSE decoder reads as one: some servers mislabel their
// streams):
//
//   - HTML (a proxy's login or block page, a web app at the base URL) is
//     permanent: asking again gets the same page;
//   - JSON with an error object (a gateway that answers errors with 200)
//     is classified as an error chunk is, with the retry hint;
//   - any other JSON (a server that does not stream) is permanent.
//
// Read as an event stream, either body holds no chunk, and the call
// failed as a stream that ended early (transient, retried).
func (p *Provider) notEventStream(resp *http.Response, sc scrubber) *failure {
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil {
		return nil
	}
	const what = "%s: the server answered 200 with Content-Type %s, not an event stream (a proxy's page, or a base_url that is not a Chat Completions API?)"
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml":
		return &failure{kind: agent.ErrorPermanent, text: fmt.Sprintf(what, p.o.name, mt)}
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		var env struct {
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal(body, &env) == nil && len(env.Error) > 0 && string(env.Error) != "null" {
			f := p.errorChunkFailure(string(env.Error), sc)
			if f.kind.Retryable() {
				f.retryAfter = retryAfter(resp.Header, p.o.now())
			}
			return f
		}
		return &failure{kind: agent.ErrorPermanent, text: fmt.Sprintf(what, p.o.name, mt)}
	}
	return nil
}

// transportKind classifies an error that is not an HTTP status: network
// failures are transient, anything else (a request that cannot be built)
// is permanent.
func transportKind(err error) agent.ErrorKind {
	var ue *url.Error
	var ne net.Error
	switch {
	case errors.As(err, &ue), errors.As(err, &ne),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE):
		return agent.ErrorTransient
	}
	return agent.ErrorPermanent
}

// transportText describes a transport error without the request's URL
// query or user info (they may hold a key).
func transportText(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + " " + redactURL(ue.URL) + ": " + ue.Err.Error()
	}
	return err.Error()
}

// retryAfter reads a server's retry hint: retry-after-ms (milliseconds),
// or Retry-After in seconds or as an HTTP date. 0 when there is none.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := strings.TrimSpace(h.Get("retry-after-ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && !math.IsInf(ms, 0) {
			return capWait(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s > 0 && !math.IsInf(s, 0) {
			return capWait(s * float64(time.Second))
		}
		return 0
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return min(d, maxHint)
		}
	}
	return 0
}

// maxHint bounds a retry hint (a day), so a silly header cannot overflow.
const maxHint = 24 * time.Hour

func capWait(ns float64) time.Duration {
	if math.IsNaN(ns) || ns <= 0 {
		return 0
	}
	if ns > float64(maxHint) {
		return maxHint
	}
	return time.Duration(ns)
}
