package web

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/engine/wire"
)

// FetchRequest is the payload of web::fetch.
type FetchRequest struct {
	// URL is an absolute http or https URL, at most [MaxURLLength] bytes,
	// without credentials. Surrounding spaces are ignored.
	URL string `json:"url"`
	// MaxBytes bounds the body read; 0 is [DefaultMaxBytes]. More than the
	// fetcher's ceiling ([WithMaxBytes]) is lowered to it.
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// TimeoutMs bounds the whole fetch, redirects and body included; 0 is
	// [DefaultTimeout], at most [MaxTimeout].
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
}

// Validate checks the request; every failure is invalid_payload.
func (r FetchRequest) Validate() error {
	if _, err := parseURL(r.URL); err != nil {
		return wire.Errorf(wire.CodeInvalidPayload, "url: %s", err.Error())
	}
	if r.MaxBytes < 0 {
		return wire.Errorf(wire.CodeInvalidPayload, "max_bytes %d is negative", r.MaxBytes)
	}
	if r.TimeoutMs < 0 || r.TimeoutMs > MaxTimeout.Milliseconds() {
		return wire.Errorf(wire.CodeInvalidPayload, "timeout_ms %d outside 0..%d", r.TimeoutMs, MaxTimeout.Milliseconds())
	}
	return nil
}

// timeout is the fetch's time budget.
func (r FetchRequest) timeout() time.Duration {
	if r.TimeoutMs == 0 {
		return DefaultTimeout
	}
	return time.Duration(r.TimeoutMs) * time.Millisecond
}

// FetchResponse is the answer of web::fetch. A status of 400 and above is
// an answer too, not an error: the body often says what went wrong.
type FetchResponse struct {
	// URL is the final URL, after redirects.
	URL string `json:"url"`
	// Status is the HTTP status code of the final response.
	Status int `json:"status"`
	// ContentType is the response's Content-Type header (bytes that are
	// not UTF-8 replaced by U+FFFD), or the sniffed type when it had none.
	ContentType string `json:"content_type"`
	// Content is the body as UTF-8 text: HTML turned into readable text
	// (links as [text](url)), other text decoded from its charset. Empty
	// when Binary.
	Content string `json:"content"`
	// Bytes is the size of the body read, before any conversion; 0 when
	// Binary (a binary body is not read).
	Bytes int64 `json:"bytes"`
	// Truncated is true when the body was longer than max_bytes, the text
	// of an HTML page was (absolute links can make it longer than its
	// markup), or the content was cut to fit in one NATS message.
	Truncated bool `json:"truncated"`
	// Binary is true when the content type is not text: no content.
	Binary bool `json:"binary,omitempty"`
	// DurationMs is the time from the request to the end of the body.
	DurationMs int64 `json:"duration_ms"`
}

// urlError is why a URL is refused, worded for the caller.
type urlError string

func (e urlError) Error() string { return string(e) }

// parseURL accepts an absolute http(s) URL with a host and no
// credentials, at most MaxURLLength bytes; the same rules hold for every
// redirect.
func parseURL(raw string) (*url.URL, error) {
	raw = strings.TrimSpace(raw)
	switch {
	case raw == "":
		return nil, urlError("required")
	case len(raw) > MaxURLLength:
		return nil, urlError("longer than " + strconv.Itoa(MaxURLLength) + " bytes")
	case !utf8.ValidString(raw):
		return nil, urlError("not valid UTF-8")
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, urlError("does not parse: " + err.Error())
	}
	switch u.Scheme {
	case "http", "https":
	case "":
		return nil, urlError("has no scheme: write it as http://… or https://…")
	default:
		return nil, urlError("scheme " + strconv.Quote(u.Scheme) + " is not allowed: only http and https")
	}
	if u.Opaque != "" || u.Host == "" || u.Hostname() == "" {
		return nil, urlError("has no host: write it as " + u.Scheme + "://host/path")
	}
	if u.User != nil {
		return nil, urlError("carries credentials (user:password@): they are refused")
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return nil, urlError("port " + strconv.Quote(p) + " is not 1..65535")
		}
	}
	u.Fragment, u.RawFragment = "", ""
	return u, nil
}
