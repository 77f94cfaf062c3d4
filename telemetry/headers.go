package telemetry

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// headerVars are the variables the OTLP exporters take their request
// headers from. Their values are usually credentials (Authorization=Bearer
// …, x-honeycomb-team=…, DD-API-KEY=…), so nothing iii says about them
// quotes a value.
var headerVars = []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"}

// minSecret is the shortest header value (or word of one) the error
// handler scrubs: shorter ones ("Bearer", "true") are not secrets, and
// replacing them would garble the text.
const minSecret = 8

// checkHeaders refuses header variables the exporters would not parse
// whole: an entry without '=', a name that is not an HTTP token, a value
// with a bad %-escape. The exporters skip such an entry and report it to
// OpenTelemetry's global logger with the entry quoted (stderr by default,
// outside the node's log), so a key written "Authorization: Bearer …"
// would be printed and then not sent. The error names the variable and the
// entry's position, never its text. Blank entries (a trailing comma) are
// left to the exporters: they hold nothing to leak.
func checkHeaders(getenv func(string) string) error {
	for _, name := range headerVars {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			continue
		}
		entries := strings.Split(v, ",")
		for i, entry := range entries {
			if strings.TrimSpace(entry) == "" {
				continue
			}
			k, val, ok := strings.Cut(entry, "=")
			var why string
			switch {
			case !ok:
				why = "has no '='"
			case !validHeaderName(strings.TrimSpace(k)):
				why = "has a name that is not an HTTP header name"
			default:
				if _, err := url.PathUnescape(val); err != nil {
					why = "has a value with an invalid %-escape"
				}
			}
			if why != "" {
				return fmt.Errorf("%w: %s: entry %d of %d %s (want name=value pairs separated by commas, values %%-encoded; the entry is not shown: it may hold a credential)",
					ErrInvalidEnv, name, i+1, len(entries), why)
			}
		}
	}
	return nil
}

// validHeaderName reports whether s is an HTTP token, as the exporters
// check a header name.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// headerSecrets are the texts the error handler scrubs: each header value
// of the header variables as the exporters send it (%-decoded, trimmed)
// and as written, and each blank-separated word of it (a collector may
// echo the token of "Bearer <token>" alone), those of at least minSecret
// bytes, longest first so that a value is replaced before its words.
func headerSecrets(getenv func(string) string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(s string) {
		if len(s) >= minSecret && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, name := range headerVars {
		for _, entry := range strings.Split(getenv(name), ",") {
			_, raw, ok := strings.Cut(entry, "=")
			if !ok {
				continue
			}
			raw = strings.TrimSpace(raw)
			add(raw)
			dec, err := url.PathUnescape(raw)
			if err != nil {
				continue
			}
			dec = strings.TrimSpace(dec)
			add(dec)
			for _, w := range strings.Fields(dec) {
				add(w)
			}
		}
	}
	// Longest first: "Bearer tok…" goes before "tok…".
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}
