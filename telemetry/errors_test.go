package telemetry_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/telemetry"
)

func TestErrorHandler(t *testing.T) {
	var buf bytes.Buffer
	h := telemetry.ErrorHandler(slog.New(slog.NewTextHandler(&buf, nil)), time.Hour)
	h.Handle(errors.New(strings.Repeat("é", 400)))
	for range 5 {
		h.Handle(errors.New("again"))
	}
	out := buf.String()
	if n := strings.Count(out, "msg=opentelemetry"); n != 1 {
		t.Fatalf("%d records in an interval, want 1:\n%s", n, out)
	}
	if len(out) > 500 || !strings.Contains(out, "…") {
		t.Fatalf("the text is not cut:\n%s", out)
	}
	buf.Reset()
	h = telemetry.ErrorHandler(slog.New(slog.NewTextHandler(&buf, nil)), 0)
	h.Handle(errors.New("one"))
	h.Handle(errors.New("two"))
	if n := strings.Count(buf.String(), "msg=opentelemetry"); n != 2 {
		t.Fatalf("%d records without an interval, want 2:\n%s", n, buf.String())
	}
}
