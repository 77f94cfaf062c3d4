package telemetry

import (
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
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
func ErrorHandler(logger *slog.Logger, interval time.Duration) otel.ErrorHandler {
	h := &errorHandler{logger: logger, interval: interval}
	return otel.ErrorHandlerFunc(h.handle)
}

type errorHandler struct {
	logger   *slog.Logger
	interval time.Duration

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
	text := err.Error()
	if len(text) > maxErrorText {
		cut := maxErrorText
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut] + "…"
	}
	h.logger.Warn("opentelemetry", "error", text, "left_out", dropped)
}
