package httpgw

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// Limits of a route.
const (
	// MaxPathLen bounds a route's path pattern in bytes.
	MaxPathLen = 512
	// MaxMethodLen bounds a method name.
	MaxMethodLen = 32
	// AnyMethod as a route's method matches every method the gateway has no
	// more specific route for.
	AnyMethod = "*"
)

// Route maps requests with Method on paths matching Path onto the function
// FunctionID. It is also the request of http::add_route.
//
// Path is "/" or "/"-separated segments, each one of
//
//   - a literal ("users"), matched against the percent-decoded request
//     segment;
//   - ":name", a parameter matching one non-empty segment;
//   - "*name", last only, matching the rest of the path (zero or more
//     segments, joined by "/").
//
// Where several routes match, the most specific wins, segment by segment
// from the left: literal before parameter before wildcard. A trailing slash
// is ignored, on routes and on requests. Method is upper-cased; "*" matches
// any method.
type Route struct {
	Method     string `json:"method"`
	Path       string `json:"path"`
	FunctionID string `json:"function_id"`
}

// Validate checks the route as http::add_route does; the error is an
// invalid_payload *wire.Error wrapping [ErrInvalidRoute].
func (r Route) Validate() error {
	_, err := compileRoute(r)
	return err
}

type segKind uint8

const (
	segStatic segKind = iota
	segParam
	segWild
)

type segment struct {
	kind segKind
	text string // the literal, or the parameter's name
}

// compiled is a validated route in normal form.
type compiled struct {
	Route
	key    string    // KV key: method token and shape
	segs   []segment // without the leading root
	params []string  // names of the param and wildcard segments, in order
}

func invalidRoute(format string, args ...any) *wire.Error {
	return wire.Wrap(wire.CodeInvalidPayload, fmt.Errorf("%w: "+format, append([]any{ErrInvalidRoute}, args...)...), "")
}

// normMethod validates and upper-cases a method.
func normMethod(m string) (string, error) {
	if m == AnyMethod {
		return m, nil
	}
	if m == "" || len(m) > MaxMethodLen {
		return "", invalidRoute("method %q must be 1-%d characters or %q", truncate(m, 40), MaxMethodLen, AnyMethod)
	}
	m = strings.ToUpper(m)
	for i := 0; i < len(m); i++ {
		c := m[i]
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return "", invalidRoute("method %q may only contain letters, digits, '-' and '_'", m)
		}
	}
	return m, nil
}

// methodToken is the method's first token of a route's KV key.
func methodToken(m string) string {
	if m == AnyMethod {
		return "_any" // methods are upper case, so this never collides
	}
	return m
}

// compileRoute validates r and derives its key. Two routes that match the
// same requests (same method, same literals, parameters and wildcard in the
// same places) get the same key, whatever their parameter names.
func compileRoute(r Route) (*compiled, error) {
	if err := subjects.ValidateFunctionID(r.FunctionID); err != nil {
		return nil, wire.Wrap(wire.CodeInvalidPayload, fmt.Errorf("%w: %w", ErrInvalidRoute, err), "")
	}
	return compilePattern(r.Method, r.Path, r.FunctionID)
}

func compilePattern(method, path, fnID string) (*compiled, error) {
	m, err := normMethod(method)
	if err != nil {
		return nil, err
	}
	segs, norm, err := parsePath(path)
	if err != nil {
		return nil, err
	}
	c := &compiled{Route: Route{Method: m, Path: norm, FunctionID: fnID}, segs: segs}
	shape := make([]string, len(segs))
	seen := map[string]bool{}
	for i, s := range segs {
		switch s.kind {
		case segStatic:
			shape[i] = s.text
		case segParam, segWild:
			if seen[s.text] {
				return nil, invalidRoute("path %q names parameter %q twice", norm, s.text)
			}
			seen[s.text] = true
			c.params = append(c.params, s.text)
			shape[i] = ":"
			if s.kind == segWild {
				shape[i] = "*"
			}
		}
	}
	c.key = methodToken(m)
	if len(shape) > 0 {
		// Literal segments are escaped ('=' and hex), so a literal never
		// yields the bare tokens "=3A" and "=2A" that ':' and '*' become.
		k, err := subjects.KVKey(strings.Join(shape, "/"))
		if err != nil {
			return nil, invalidRoute("path %q: %v", norm, err)
		}
		c.key += "." + k
	}
	return c, nil
}

// parsePath validates a path pattern and returns its segments and its
// normal form (no trailing slash).
func parsePath(p string) ([]segment, string, error) {
	if !strings.HasPrefix(p, "/") {
		return nil, "", invalidRoute("path %q must start with '/'", truncate(p, 64))
	}
	if len(p) > MaxPathLen {
		return nil, "", invalidRoute("path is longer than %d bytes", MaxPathLen)
	}
	if !utf8.ValidString(p) {
		return nil, "", invalidRoute("path is not valid UTF-8")
	}
	for _, r := range p {
		if unicode.IsControl(r) || r == '?' || r == '#' {
			return nil, "", invalidRoute("path %q contains %q", p, r)
		}
	}
	norm := p
	if len(norm) > 1 {
		norm = strings.TrimSuffix(norm, "/")
	}
	if norm == "/" {
		return nil, norm, nil
	}
	parts := strings.Split(norm[1:], "/")
	segs := make([]segment, len(parts))
	for i, part := range parts {
		switch {
		case part == "":
			return nil, "", invalidRoute("path %q has an empty segment", p)
		case part[0] == ':':
			if err := paramName(part[1:]); err != nil {
				return nil, "", invalidRoute("path %q: parameter %q: %v", p, part, err)
			}
			segs[i] = segment{kind: segParam, text: part[1:]}
		case part[0] == '*':
			if err := paramName(part[1:]); err != nil {
				return nil, "", invalidRoute("path %q: wildcard %q: %v", p, part, err)
			}
			if i != len(parts)-1 {
				return nil, "", invalidRoute("path %q: wildcard %q must be the last segment", p, part)
			}
			segs[i] = segment{kind: segWild, text: part[1:]}
		default:
			segs[i] = segment{kind: segStatic, text: part}
		}
	}
	return segs, norm, nil
}

// paramName checks a parameter name: a letter or '_', then letters, digits
// and '_', at most 64 bytes.
func paramName(n string) error {
	if n == "" || len(n) > 64 {
		return fmt.Errorf("name must be 1-64 characters")
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return fmt.Errorf("name may only contain letters, digits and '_', not starting with a digit")
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
