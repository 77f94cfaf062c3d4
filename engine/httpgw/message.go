package httpgw

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/engine/wire"
)

// Request is what a route's function receives.
type Request struct {
	// Method is the request method ("GET").
	Method string `json:"method"`
	// Path is the percent-decoded request path ("/users/42"). Path, query
	// and header values are UTF-8: a request with other bytes is refused
	// with 400.
	Path string `json:"path"`
	// Route is the path pattern that matched ("/users/:id").
	Route string `json:"route"`
	// PathParams holds the ":name" and "*name" segments by name.
	PathParams map[string]string `json:"path_params"`
	// Query is the query string, each name with all its values.
	Query url.Values `json:"query"`
	// Headers holds the request headers with lower-case names (so not an
	// http.Header, whose Get canonicalizes), plus "host".
	// Hop-by-hop headers (Connection and those it names, Keep-Alive,
	// Proxy-*, TE, Trailer, Transfer-Encoding, Upgrade) are dropped;
	// Authorization and Cookie are passed on: the gateway does no
	// authentication, the function does.
	Headers map[string][]string `json:"headers"`
	// Body is the request body: the text itself when the Content-Type is
	// textual (text/*, JSON, XML, form, or none) and the bytes are UTF-8,
	// otherwise standard base64 with BodyBase64 set.
	Body       string `json:"body"`
	BodyBase64 bool   `json:"body_base64,omitempty"`
	// RemoteAddr is the client's address as the HTTP server saw it.
	RemoteAddr string `json:"remote_addr,omitempty"`
}

// Response is what a route's function returns. Every field is optional:
// the zero Response is an empty 200.
type Response struct {
	// StatusCode is the HTTP status, 200-599; zero means 200.
	StatusCode int `json:"status_code,omitempty"`
	// Headers are the response headers. A function in another language may
	// send each value as a string or a list of strings.
	Headers map[string][]string `json:"headers,omitempty"`
	// Body is the response body: a string is sent as it is, with
	// Content-Type text/plain; charset=utf-8 (or decoded from standard
	// base64 when BodyBase64 is set, application/octet-stream), []byte
	// (msgpack bin) as bytes (application/octet-stream), and any other
	// value as JSON (application/json); a Content-Type in Headers wins.
	// The gateway never lets the type be sniffed: every response has
	// X-Content-Type-Options: nosniff.
	Body       any  `json:"body,omitempty"`
	BodyBase64 bool `json:"body_base64,omitempty"`
}

// replyResponse decodes a function's reply loosely (header values as a
// string or a list).
type replyResponse struct {
	StatusCode int            `json:"status_code"`
	Headers    map[string]any `json:"headers"`
	Body       any            `json:"body"`
	BodyBase64 bool           `json:"body_base64"`
}

// hopByHop are the headers that describe one connection, not the message
// (RFC 9110 §7.6.1), plus Content-Length, which the gateway sets.
var hopByHop = map[string]bool{
	"Connection":          true,
	"Keep-Alive":          true,
	"Proxy-Connection":    true,
	"Proxy-Authenticate":  true,
	"Proxy-Authorization": true,
	"Te":                  true,
	"Trailer":             true,
	"Transfer-Encoding":   true,
	"Upgrade":             true,
}

// requestHeaders copies h without hop-by-hop headers, names lower-cased.
func requestHeaders(r *http.Request) map[string][]string {
	drop := map[string]bool{}
	for _, v := range r.Header.Values("Connection") {
		for f := range strings.SplitSeq(v, ",") {
			drop[http.CanonicalHeaderKey(strings.TrimSpace(f))] = true
		}
	}
	out := make(map[string][]string, len(r.Header)+1)
	for k, v := range r.Header {
		ck := http.CanonicalHeaderKey(k)
		if hopByHop[ck] || drop[ck] {
			continue
		}
		lk := strings.ToLower(k)
		out[lk] = append(out[lk], v...)
	}
	if r.Host != "" {
		out["host"] = []string{r.Host}
	}
	return out
}

// checkUTF8 refuses query names and values and header values that are not
// UTF-8: the function receives them as strings, which the JSON codec would
// silently turn into U+FFFD. (Header names are tokens, so ASCII.)
func checkUTF8(query url.Values, headers map[string][]string) error {
	for k, vs := range query {
		if !utf8.ValidString(k) {
			return fmt.Errorf("query parameter name %q is not valid UTF-8", truncate(k, 64))
		}
		for _, v := range vs {
			if !utf8.ValidString(v) {
				return fmt.Errorf("query parameter %q has a value that is not valid UTF-8", truncate(k, 64))
			}
		}
	}
	for k, vs := range headers {
		for _, v := range vs {
			if !utf8.ValidString(v) {
				return fmt.Errorf("header %q has a value that is not valid UTF-8", k)
			}
		}
	}
	return nil
}

// textual reports whether a body of this Content-Type travels as text.
func textual(ct string) bool {
	if strings.TrimSpace(ct) == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	switch {
	case strings.HasPrefix(mt, "text/"),
		strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"):
		return true
	}
	switch mt {
	case "application/json", "application/xml", "application/x-www-form-urlencoded",
		"application/javascript", "application/ecmascript", "application/x-ndjson",
		"application/yaml", "application/x-yaml", "application/graphql", "application/sql":
		return true
	}
	return false
}

// encodeBody returns the body as Request carries it.
func encodeBody(ct string, body []byte) (string, bool) {
	if len(body) == 0 {
		return "", false
	}
	if textual(ct) && utf8.Valid(body) {
		return string(body), false
	}
	return base64.StdEncoding.EncodeToString(body), true
}

// errBadResponse marks a reply that is not an HTTP response (→ 502).
var errBadResponse = errors.New("function reply is not a valid HTTP response")

// render turns a decoded reply into status, headers and body bytes.
func render(rr *replyResponse) (int, http.Header, []byte, error) {
	status := rr.StatusCode
	if status == 0 {
		status = http.StatusOK
	}
	if status < 200 || status > 599 {
		return 0, nil, nil, fmt.Errorf("%w: status_code %d is outside 200-599", errBadResponse, rr.StatusCode)
	}
	h := http.Header{}
	for k, v := range rr.Headers {
		if !validHeaderName(k) {
			return 0, nil, nil, fmt.Errorf("%w: header name %q", errBadResponse, truncate(k, 64))
		}
		ck := http.CanonicalHeaderKey(k)
		if hopByHop[ck] || ck == "Content-Length" {
			continue
		}
		var vals []string
		switch x := v.(type) {
		case string:
			vals = []string{x}
		case []any:
			for _, e := range x {
				s, ok := e.(string)
				if !ok {
					return 0, nil, nil, fmt.Errorf("%w: header %q has a value that is not a string", errBadResponse, k)
				}
				vals = append(vals, s)
			}
		case []string:
			vals = x
		default:
			return 0, nil, nil, fmt.Errorf("%w: header %q must be a string or a list of strings", errBadResponse, k)
		}
		for _, s := range vals {
			if !validHeaderValue(s) {
				return 0, nil, nil, fmt.Errorf("%w: header %q has a control character", errBadResponse, k)
			}
			h.Add(ck, s)
		}
	}
	// A body without a Content-Type gets the one of its kind, never a
	// sniffed one: net/http (and browsers, without nosniff) would serve a
	// string echoing user input as text/html.
	var body []byte
	ct := ""
	switch x := rr.Body.(type) {
	case nil:
	case string:
		ct = "text/plain; charset=utf-8"
		if rr.BodyBase64 {
			ct = "application/octet-stream"
			b, err := base64.StdEncoding.DecodeString(x)
			if err != nil {
				b, err = base64.RawStdEncoding.DecodeString(x)
			}
			if err != nil {
				return 0, nil, nil, fmt.Errorf("%w: body_base64 is set but body is not base64", errBadResponse)
			}
			body = b
		} else {
			body = []byte(x)
		}
	case []byte:
		ct = "application/octet-stream"
		body = x
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return 0, nil, nil, fmt.Errorf("%w: body does not encode as JSON: %v", errBadResponse, err)
		}
		ct = "application/json"
		body = b
	}
	// An empty value counts as none: browsers sniff it too. An empty body
	// gets none (a 304's would overwrite the cached one).
	if len(body) > 0 && h.Get("Content-Type") == "" {
		h.Set("Content-Type", ct)
	}
	h.Set("X-Content-Type-Options", "nosniff")
	return status, h, body, nil
}

func validHeaderName(k string) bool {
	if k == "" || len(k) > 256 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// statusClientClosed answers a request whose client went away before the
// function answered (nginx's 499).
const statusClientClosed = 499

// StatusFor maps a wire error code onto the HTTP status the gateway answers
// with: the catalog's status, except function_not_found, which is 502 Bad
// Gateway (the route exists, nothing serves its function: the reverse-proxy
// answer for an upstream that is down, and distinct from an unknown route's
// 404), and canceled, which is 503 (a client that still waits for the
// answer did not cancel: the function's side gave up, e.g. shutting down;
// the catalog's 499 is no status a client knows).
func StatusFor(code wire.Code) int {
	switch code {
	case wire.CodeFunctionNotFound:
		return http.StatusBadGateway
	case wire.CodeCanceled:
		return http.StatusServiceUnavailable
	}
	ent, _ := wire.Lookup(code)
	return ent.Status
}

// writeError writes the JSON error envelope with status.
func writeError(w http.ResponseWriter, status int, e *wire.Error) {
	body, err := json.Marshal(wire.Envelope{Error: e})
	if err != nil {
		body = []byte(`{"error":{"code":"internal","message":"error does not encode","retryable":false}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
