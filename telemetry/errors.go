package telemetry

import (
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"

	"github.com/iii-on-nats/iii/agent/redact"
)

// maxErrorText bounds the text of one OpenTelemetry error in the log.
const maxErrorText = 300

// ErrorHandler routes OpenTelemetry's own errors (an exporter that fails,
// a propagator handed a malformed traceparent or baggage header) into
// logger instead of the standard library's log, which otel uses by
// default and which writes to stderr outside the node's log. A client
// sending a malformed header on every call must not flood the log, so the
// handler logs at most one record every interval (at Warn, its text cut to
// 300 bytes) and says how many it left out since.
//
// An exporter's error quotes the collector's answer, and a collector or a
// proxy in front of it may echo the credential it was sent. So before the
// text is cut, the handler replaces with "[redacted]" the values of
// OTEL_EXPORTER_OTLP_HEADERS and OTEL_EXPORTER_OTLP_TRACES_HEADERS (as
// written, %-decoded, and each word of at least 8 bytes, read once through
// [WithGetenv], os.Getenv by default; the other options do not matter
// here), then any credential agent/redact recognizes (Bearer tokens, sk-…
// keys, token=…, URL passwords).
func ErrorHandler(logger *slog.Logger, interval time.Duration, opts ...Option) otel.ErrorHandler {
	o := options{getenv: os.Getenv}
	for _, opt := range opts {
		opt(&o)
	}
	h := &errorHandler{logger: logger, interval: interval, secrets: headerSecrets(o.getenv)}
	return otel.ErrorHandlerFunc(h.handle)
}

type errorHandler struct {
	logger   *slog.Logger
	interval time.Duration
	secrets  []string // header values, longest first

	mu      sync.Mutex
	last    time.Time
	dropped int
}

func (h *errorHandler) handle(err error) {
	if err == nil {
		return
	}
	h.mu.Lock()
	now := time.Now()
	if !h.last.IsZero() && now.Sub(h.last) < h.interval {
		h.dropped++
		h.mu.Unlock()
		return
	}
	dropped := h.dropped
	h.last, h.dropped = now, 0
	h.mu.Unlock()
	text := h.scrub(err.Error())
	if len(text) > maxErrorText {
		cut := maxErrorText
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut] + "…"
	}
	h.logger.Warn("opentelemetry", "error", text, "left_out", dropped)
}

// scrub replaces the configured header values, then whatever else looks
// like a credential. It runs before the text is cut, so a cut cannot leave
// the first bytes of a secret behind.
func (h *errorHandler) scrub(text string) string {
	for _, s := range h.secrets {
		text = strings.ReplaceAll(text, s, redact.Redacted)
	}
	if r, ok := redact.Value(text).(string); ok {
		text = r
	}
	return text
}
